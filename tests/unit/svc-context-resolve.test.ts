import { describe, expect, test } from "bun:test";
import { activeContext } from "../../lib/config/resolve.ts";
import type { SvcConfig } from "../../lib/config/schema.ts";
import { isSvcError } from "../../lib/errors.ts";

const config = (over: Partial<SvcConfig> = {}): SvcConfig => ({
  currentContext: "us-ts-alpha",
  contexts: {
    "us-ts-alpha": {
      country: "US",
      sensitivity: "TS",
      compartment: "ALPHA",
      kubeContext: "k",
      namespace: "alpha",
    },
  },
  defaultUserGroups: ["system:authenticated"],
  requireExplicitContextSwitch: false,
  auditLog: { enabled: false, path: "~/.svc/audit.log", level: "info" },
  ...over,
});

function message(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    if (isSvcError(e)) return e.message;
    throw e;
  }
  throw new Error("expected an error");
}

describe("the active compartment context", () => {
  test("comes from the current context, with the label of 2.2", () => {
    const c = activeContext(config(), {});
    expect(c.label).toBe("US-TS-ALPHA");
    expect(c.kubeContext).toBe("k");
    expect(c.overriddenBy).toEqual([]);
  });

  test("environment variables override the file (2.1)", () => {
    const c = activeContext(config(), { SVC_COMPARTMENT: "bravo", SVC_SENSITIVITY: "TS" });
    expect(c.label).toBe("US-TS-BRAVO");
    expect(c.overriddenBy).toEqual(["SVC_COMPARTMENT"]);
  });

  test("KUBECONFIG wins over the file's kubeconfig", () => {
    expect(activeContext(config({ kubeconfig: "/a" }), { KUBECONFIG: "/b" }).kubeconfig).toBe("/b");
    expect(activeContext(config({ kubeconfig: "/a" }), {}).kubeconfig).toBe("/a");
  });

  test("requireExplicitContextSwitch refuses an override that changes the compartment, not one that agrees", () => {
    const strict = config({ requireExplicitContextSwitch: true });
    expect(message(() => activeContext(strict, { SVC_COMPARTMENT: "BRAVO" }))).toContain(
      "SVC_COMPARTMENT=BRAVO would change the compartment of context us-ts-alpha (ALPHA), and requireExplicitContextSwitch is true",
    );
    expect(activeContext(strict, { SVC_COMPARTMENT: "alpha" }).label).toBe("US-TS-ALPHA");
  });

  test("no current context, or a current context that does not exist, is a clear error", () => {
    expect(message(() => activeContext(config({ currentContext: "" }), {}))).toContain("no current context");
    expect(message(() => activeContext(config({ currentContext: "gone" }), {}))).toContain(
      "Context not found",
    );
    expect(message(() => activeContext(config(), { SVC_COUNTRY: "U S" }))).toContain(
      "letters and digits only",
    );
  });
});
