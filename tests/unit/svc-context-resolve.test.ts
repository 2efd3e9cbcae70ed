import { describe, expect, test } from "bun:test";
import { activeContext } from "../../lib/config/resolve.ts";
import type { SvcConfig } from "../../lib/config/schema.ts";
import { svcError } from "../support/errors.ts";

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

describe("the active compartment context", () => {
  test("comes from the current context, with its compartment label", () => {
    const c = activeContext(config(), {});
    expect(c.label).toBe("US-TS-ALPHA");
    expect(c.kubeContext).toBe("k");
    expect(c.overriddenBy).toEqual([]);
  });

  test("environment variables override the file", () => {
    const c = activeContext(config(), { SVC_COMPARTMENT: "bravo", SVC_SENSITIVITY: "TS" });
    expect(c.label).toBe("US-TS-BRAVO");
    expect(c.overriddenBy).toEqual(["SVC_COMPARTMENT"]);
  });

  test("KUBECONFIG wins over the file's kubeconfig", () => {
    expect(activeContext(config({ kubeconfig: "/a" }), { KUBECONFIG: "/b" }).kubeconfig).toBe("/b");
    expect(activeContext(config({ kubeconfig: "/a" }), {}).kubeconfig).toBe("/a");
    // kubectl reads a KUBECONFIG list itself (a.yaml:b.yaml); svc passes no --kubeconfig then.
    expect(
      activeContext(config({ kubeconfig: "/a" }), { KUBECONFIG: "/b:/c" }).target.kubeconfig,
    ).toBeUndefined();
    expect(activeContext(config({ kubeconfig: "/a" }), {}).target.kubeconfig).toBe("/a");
  });

  test("requireExplicitContextSwitch refuses an override that changes the compartment, not one that agrees", () => {
    const strict = config({ requireExplicitContextSwitch: true });
    expect(svcError(() => activeContext(strict, { SVC_COMPARTMENT: "BRAVO" })).message).toContain(
      "SVC_COMPARTMENT=BRAVO would change the compartment of context us-ts-alpha (ALPHA), and requireExplicitContextSwitch is true",
    );
    expect(activeContext(strict, { SVC_COMPARTMENT: "alpha" }).label).toBe("US-TS-ALPHA");
  });

  test("no current context, or a current context that does not exist, is a clear error", () => {
    expect(svcError(() => activeContext(config({ currentContext: "" }), {})).message).toContain(
      "no current context",
    );
    expect(svcError(() => activeContext(config({ currentContext: "gone" }), {})).message).toContain(
      "Context not found",
    );
    expect(svcError(() => activeContext(config(), { SVC_COUNTRY: "U S" })).message).toBe(
      'SVC_COUNTRY: "U S" is not a country (allowed: 2 or 3 letters, such as US, UK, AUS)',
    );
    expect(svcError(() => activeContext(config(), { SVC_SENSITIVITY: "TOPSECRET" })).message).toBe(
      'SVC_SENSITIVITY: "TOPSECRET" is not a sensitivity (allowed: U, C, S or TS)',
    );
  });

  test("a current context named like an Object property is looked up as a name, never inherited", () => {
    for (const name of ["toString", "__proto__", "constructor", "hasOwnProperty"])
      expect(svcError(() => activeContext(config({ currentContext: name }), {})).message).toBe(
        `Context not found: the current context ${JSON.stringify(name)} is not among the contexts (known: us-ts-alpha)`,
      );
    const contexts = Object.defineProperty({}, "__proto__", {
      value: { country: "UK", sensitivity: "S", compartment: "BRAVO", kubeContext: "kb" },
      enumerable: true,
    });
    const c = activeContext(config({ currentContext: "__proto__", contexts }), {});
    expect(c.label).toBe("UK-S-BRAVO");
    expect(c.target.kubeContext).toBe("kb");
  });
});
