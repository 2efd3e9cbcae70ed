import { afterAll, describe, expect, test } from "bun:test";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type LoadOptions, loadConfig, saveConfig } from "../../lib/config/file.ts";
import { compartmentLabel, contextName, findContext } from "../../lib/config/schema.ts";
import { tempDir } from "../support/dev-api.ts";
import { svcError } from "../support/errors.ts";

/** loadConfig where a warning the test does not ask for fails it. */
const load = (path: string, o: Partial<LoadOptions> = {}) =>
  loadConfig(path, {
    warn: (m) => {
      throw new Error(`unexpected warning: ${m}`);
    },
    ...o,
  });

const dir = tempDir("svc-config-");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function write(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

describe("~/.svc/config.yaml", () => {
  test("a missing file other than the default is an error naming SVC_CONFIG", () => {
    const path = join(dir, "absent.yaml");
    expect(svcError(() => load(path))).toEqual({
      code: "usage",
      message: `SVC_CONFIG=${path}: no such file; create it with svc context create, or unset SVC_CONFIG`,
    });
  });

  test("with mayCreate (svc context create) a missing file is an empty configuration with the defaults", () => {
    const c = load(join(dir, "absent.yaml"), { mayCreate: true });
    expect(c.exists).toBe(false);
    expect(Object.keys(c.config.contexts)).toEqual([]);
    expect(c.config.defaultUserGroups).toEqual(["system:authenticated"]);
    expect(c.config.auditLog).toEqual({ enabled: false, path: "~/.svc/audit.log", level: "info" });
    expect(c.config.requireExplicitContextSwitch).toBe(false);
  });

  test("every field of docs/svc-config.md is read", () => {
    const c = load(
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
    const message = svcError(() => load(path)).message;
    expect(message).toContain(`${path}:5: contexts.x.sensitivity: sensitivity must be a string`);
    expect(message).toContain(
      `${path}:9: auditLog.level: auditLog.level must be one of debug, info, warn, error`,
    );
    expect(svcError(() => load(write("syntax.yaml", "contexts: [\n"))).message).toMatch(
      /syntax\.yaml:\d+: not valid YAML/,
    );
  });

  test("unknown keys give one warning each, with file, line and the known keys, in file order; the rest loads", () => {
    const path = write(
      "typos.yaml",
      `currentContext: x
contexts:
  x:
    country: US
    sensitivity: TS
    compartment: A
    kubeContext: k
    namspace: alpha
auditLog: {enabled: true, levle: debug}
curentContext: y
`,
    );
    const warnings: string[] = [];
    const c = load(path, { warn: (m) => warnings.push(m) });
    expect(warnings).toEqual([
      `${path}:8: unknown key "namspace" in contexts.x (known: country, sensitivity, compartment, kubeContext, namespace)`,
      `${path}:9: unknown key "levle" in auditLog (known: enabled, path, level)`,
      `${path}:10: unknown key "curentContext" at the top level (known: currentContext, contexts, defaultUserGroups, kubeconfig, requireExplicitContextSwitch, auditLog)`,
    ]);
    expect(c.config.currentContext).toBe("x");
    expect(c.config.contexts.x?.namespace).toBeUndefined();
    expect(c.config.auditLog).toEqual({ enabled: true, path: "~/.svc/audit.log", level: "info" });
  });

  test("every key the schema knows is accepted without a warning", () => {
    const warnings: string[] = [];
    load(
      write(
        "known.yaml",
        `currentContext: x
contexts:
  x: {country: US, sensitivity: TS, compartment: A, kubeContext: k, namespace: a}
defaultUserGroups: []
kubeconfig: /k
requireExplicitContextSwitch: false
auditLog: {enabled: false, path: /a.log, level: info}
`,
      ),
      { warn: (m) => warnings.push(m) },
    );
    expect(warnings).toEqual([]);
  });

  test("context names that are Object's property names are data: each is read, checked and found as written", () => {
    const names = ["__proto__", "constructor", "prototype", "toString", "hasOwnProperty"];
    const path = write(
      "proto.yaml",
      names
        .map(
          (n, i) =>
            `${i === 0 ? "contexts:\n" : ""}  ${n}: {country: US, sensitivity: TS, compartment: C${i}, kubeContext: k${i}}\n`,
        )
        .join(""),
    );
    const { config } = load(path);
    expect(Object.keys(config.contexts)).toEqual(names);
    names.forEach((n, i) => {
      expect(findContext(config, n)?.compartment).toBe(`C${i}`);
      expect(config.contexts[n]?.kubeContext).toBe(`k${i}`);
    });
    expect(findContext(config, "valueOf")).toBeUndefined();
    expect(config.contexts.valueOf).toBeUndefined();
    expect(
      svcError(() => load(write("bad-proto.yaml", "contexts:\n  constructor: {country: US}\n"))).message,
    ).toContain(`:2: contexts.constructor.sensitivity: is required`);
  });

  test("a context named __proto__ survives an edit and a save", () => {
    const path = write("proto-save.yaml", "contexts: {}\n");
    const loaded = load(path);
    loaded.doc.setIn(["contexts", "__proto__"], {
      country: "US",
      sensitivity: "TS",
      compartment: "P",
      kubeContext: "k",
    });
    loaded.doc.set("currentContext", "__proto__");
    saveConfig(loaded);
    const { config } = load(path);
    expect(config.currentContext).toBe("__proto__");
    expect(Object.keys(config.contexts)).toEqual(["__proto__"]);
    expect(findContext(config, "__proto__")?.compartment).toBe("P");
  });

  test("saving keeps the user's comments and replaces the file whole", () => {
    const path = write("comments.yaml", "# my settings\ncurrentContext: a # the usual one\ncontexts: {}\n");
    const loaded = load(path);
    loaded.doc.set("currentContext", "b");
    saveConfig(loaded);
    const text = readFileSync(path, "utf8");
    expect(text).toContain("# my settings");
    expect(text).toContain("currentContext: b # the usual one");
  });

  test("naming conventions: context names and compartment labels", () => {
    const c = { country: "US", sensitivity: "TS", compartment: "Alpha" };
    expect(contextName(c)).toBe("us-ts-alpha");
    expect(compartmentLabel(c)).toBe("US-TS-ALPHA");
  });
});
