import { afterAll, describe, expect, test } from "bun:test";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { loadConfig, saveConfig } from "../../lib/config/file.ts";
import { compartmentLabel, contextName } from "../../lib/config/schema.ts";
import { tempDir } from "../support/dev-api.ts";
import { svcError } from "../support/errors.ts";

const dir = tempDir("svc-config-");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function write(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

describe("~/.svc/config.yaml", () => {
  test("a missing file is an empty configuration with the defaults", () => {
    const c = loadConfig(join(dir, "absent.yaml"));
    expect(c.exists).toBe(false);
    expect(c.config.defaultUserGroups).toEqual(["system:authenticated"]);
    expect(c.config.auditLog).toEqual({ enabled: false, path: "~/.svc/audit.log", level: "info" });
    expect(c.config.requireExplicitContextSwitch).toBe(false);
  });

  test("every field of 2.1 is read", () => {
    const c = loadConfig(
      write(
        "full.yaml",
        `currentContext: us-ts-alpha
contexts:
  us-ts-alpha: {country: US, sensitivity: TS, compartment: ALPHA, kubeContext: prod, namespace: alpha}
defaultUserGroups: [system:authenticated, analysts]
kubeconfig: /etc/kube/config
requireExplicitContextSwitch: true
auditLog: {enabled: true, path: /var/log/svc.log, level: warn}
`,
      ),
    ).config;
    expect(c.contexts["us-ts-alpha"]?.kubeContext).toBe("prod");
    expect(c.kubeconfig).toBe("/etc/kube/config");
    expect(c.auditLog.level).toBe("warn");
  });

  test("errors name the file, the line and the field", () => {
    const path = write(
      "bad.yaml",
      `currentContext: x
contexts:
  x:
    country: US
    sensitivity: 7
    compartment: A
    kubeContext: k
auditLog:
  level: loud
`,
    );
    const message = svcError(() => loadConfig(path)).message;
    expect(message).toContain(`${path}:5: contexts.x.sensitivity: sensitivity must be a string`);
    expect(message).toContain(
      `${path}:9: auditLog.level: auditLog.level must be one of debug, info, warn, error`,
    );
    expect(svcError(() => loadConfig(write("syntax.yaml", "contexts: [\n"))).message).toMatch(
      /syntax\.yaml:\d+: not valid YAML/,
    );
  });

  test("saving keeps the user's comments and replaces the file whole", () => {
    const path = write("comments.yaml", "# my settings\ncurrentContext: a # the usual one\ncontexts: {}\n");
    const loaded = loadConfig(path);
    loaded.doc.set("currentContext", "b");
    saveConfig(loaded);
    const text = readFileSync(path, "utf8");
    expect(text).toContain("# my settings");
    expect(text).toContain("currentContext: b # the usual one");
  });

  test("naming conventions of 2.1 and 2.2", () => {
    const c = { country: "US", sensitivity: "TS", compartment: "Alpha" };
    expect(contextName(c)).toBe("us-ts-alpha");
    expect(compartmentLabel(c)).toBe("US-TS-ALPHA");
  });
});
