import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../support/dev-api.ts";
import { BUN, ROOT } from "../support/proc.ts";

/** `svc context …` as a user runs it, on a configuration file of its own (SVC_CONFIG). */
const dir = tempDir("svc-context-");
const config = join(dir, "config.yaml");
afterAll(() => rmSync(dir, { recursive: true, force: true }));
/** The kube contexts the tests' compartment contexts name: svc context create checks that they exist. */
const kubeconfig = join(dir, "kubeconfig");
writeFileSync(
  kubeconfig,
  "apiVersion: v1\nkind: Config\ncontexts: [{name: k, context: {}}, {name: k1, context: {}}, {name: k2, context: {}}]\n",
);

/** Runs svc with SVC_CONFIG set to `file`, or unset when `file` is undefined. */
function run(args: string[], file: string | undefined, env: Record<string, string> = {}) {
  const { SVC_CONFIG: _, ...inherited } = process.env;
  const r = Bun.spawnSync([BUN, "cmd/svc.ts", ...args], {
    cwd: ROOT,
    env: {
      ...inherited,
      KUBECONFIG: kubeconfig,
      ...(file === undefined ? {} : { SVC_CONFIG: file }),
      ...env,
    },
  });
  return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
}

function svc(...args: string[]) {
  return run(["context", ...args], config);
}

const create = (file: string, name: string, compartment = "A") =>
  run(
    [
      "context",
      "create",
      name,
      "--country=US",
      "--sensitivity=TS",
      `--compartment=${compartment}`,
      "--kube-context=k",
    ],
    file,
  );

/** The NAME column of `svc context list`, with a * for the current one. */
const listed = (file: string) =>
  run(["context", "list"], file)
    .out.trimEnd()
    .split("\n")
    .slice(1)
    .map((l) => (l.startsWith("*") ? `*${l.slice(1).trim().split(/\s+/)[0]}` : l.trim().split(/\s+/)[0]));

describe("svc context", () => {
  test("create, use, current and list with the columns of docs/svc-config.md", () => {
    writeFileSync(config, "# team settings\ndefaultUserGroups: [system:authenticated]\n");
    expect(
      svc(
        "create",
        "us-ts-alpha",
        "--country",
        "us",
        "--sensitivity",
        "ts",
        "--compartment",
        "alpha",
        "--kube-context",
        "k1",
      ).code,
    ).toBe(0);
    expect(
      svc(
        "create",
        "uk-s-bravo",
        "--country=UK",
        "--sensitivity=S",
        "--compartment=BRAVO",
        "--kube-context=k2",
      ).code,
    ).toBe(0);
    expect(svc("use", "uk-s-bravo").out).toBe('Switched to context "uk-s-bravo".\n');
    expect(svc("current").out).toBe("uk-s-bravo\n");
    const lines = svc("list").out.trimEnd().split("\n");
    expect(lines[0]?.split(/\s+/)).toEqual([
      "CURRENT",
      "NAME",
      "COUNTRY",
      "SENSITIVITY",
      "COMPARTMENT",
      "KUBE-CONTEXT",
    ]);
    expect(lines[1]?.split(/\s+/)).toEqual(["*", "uk-s-bravo", "UK", "S", "BRAVO", "k2"]);
    expect(lines[2]?.trim().split(/\s+/)).toEqual(["us-ts-alpha", "US", "TS", "ALPHA", "k1"]);
    expect(readFileSync(config, "utf8")).toContain("# team settings");
  });

  test('an unknown context is refused with "Context not found" and changes nothing', () => {
    const before = readFileSync(config, "utf8");
    const r = svc("use", "jp-c-gamma");
    expect(r.code).toBe(1);
    expect(r.err).toBe('svc: Context not found: "jp-c-gamma" (known: us-ts-alpha, uk-s-bravo)\n');
    expect(svc("delete", "jp-c-gamma").err).toContain("Context not found");
    expect(readFileSync(config, "utf8")).toBe(before);
  });

  test("delete removes a context and clears it as current", () => {
    expect(svc("delete", "uk-s-bravo").code).toBe(0);
    const r = svc("current");
    expect(r.code).toBe(1);
    expect(r.err).toContain("no current context");
  });

  test("bad input: a duplicate name, a value with a space, a broken file", () => {
    expect(
      svc("create", "us-ts-alpha", "--country=US", "--sensitivity=TS", "--compartment=A", "--kube-context=k")
        .err,
    ).toContain("already exists");
    expect(
      svc("create", "x", "--country=U S", "--sensitivity=TS", "--compartment=A", "--kube-context=k").err,
    ).toBe('svc: --country "U S" is not a country (allowed: 2 or 3 letters, such as US, UK, AUS)\n');
    // Every problem at once: a sensitivity no label can carry, a kube context kubectl does not know.
    expect(
      svc("create", "x", "--country=US", "--sensitivity=TOPSECRET", "--compartment=A", "--kube-context=nope")
        .err,
    ).toBe(
      'svc: --sensitivity "TOPSECRET" is not a sensitivity (allowed: U, C, S or TS); --kube-context "nope": no such context in your kubeconfig (known: k, k1, k2); add it with kubectl config set-context, or name one of these\n',
    );
    expect(listed(config)).not.toContain("x");
    writeFileSync(config, "contexts:\n  a: {country: US}\n");
    const r = svc("list");
    expect(r.code).toBe(1);
    expect(r.err).toContain(`${config}:2: contexts.a.sensitivity: is required`);
  });
});

describe("svc context: where the configuration is", () => {
  test("a missing SVC_CONFIG file is an error for every command that reads it; svc context create makes it", () => {
    const missing = join(dir, "typo", "config.yaml");
    const message = `svc: SVC_CONFIG=${missing}: no such file; create it with svc context create, or unset SVC_CONFIG\n`;
    for (const args of [
      ["context", "list"],
      ["context", "use", "x"],
      ["context", "current"],
      ["context", "delete", "x"],
      ["identity"],
      ["get", "pods"],
    ]) {
      const r = run(args, missing);
      expect({ args, code: r.code, err: r.err }).toEqual({ args, code: 1, err: message });
    }
    expect(existsSync(missing)).toBe(false);
    expect(create(missing, "us-ts-a").code).toBe(0);
    expect(listed(missing)).toEqual(["*us-ts-a"]);
  });

  test("without SVC_CONFIG, a missing ~/.svc/config.yaml is no contexts, as before", () => {
    const home = join(dir, "home");
    const list = run(["context", "list"], undefined, { HOME: home });
    expect(list.code).toBe(0);
    expect(list.err).toBe("");
    expect(list.out.trim().split(/\s+/)).toEqual([
      "CURRENT",
      "NAME",
      "COUNTRY",
      "SENSITIVITY",
      "COMPARTMENT",
      "KUBE-CONTEXT",
    ]);
    expect(run(["context", "current"], undefined, { HOME: home }).err).toBe(
      "svc: no current context; set one with svc context use <name>\n",
    );
    expect(existsSync(join(home, ".svc"))).toBe(false);
  });

  test("an unknown key is a warning naming file, line and the known keys, and the command goes on", () => {
    const file = join(dir, "typo.yaml");
    writeFileSync(
      file,
      "currentContext: x\ncontexts:\n  x: {country: US, sensitivity: TS, compartment: A, kubeContext: k}\n  y:\n    country: US\n    sensitivity: TS\n    compartment: B\n    kubeContext: k\n    namspace: b\n",
    );
    const r = run(["context", "current"], file);
    expect(r.code).toBe(0);
    expect(r.out).toBe("x\n");
    expect(r.err).toBe(
      `svc: warning: ${file}:9: unknown key "namspace" in contexts.y (known: country, sensitivity, compartment, kubeContext, namespace)\n`,
    );
  });
});

describe("svc context: names are data", () => {
  const file = join(dir, "proto.yaml");
  const names = ["__proto__", "constructor", "hasOwnProperty", "toString"];

  test("names of Object's properties are not found before they are created", () => {
    expect(create(file, "us-ts-a").code).toBe(0);
    for (const name of names) {
      const r = run(["context", "use", name], file);
      expect(r.code).toBe(1);
      expect(r.err).toBe(`svc: Context not found: ${JSON.stringify(name)} (known: us-ts-a)\n`);
      expect(run(["context", "delete", name], file).err).toContain("Context not found");
    }
  });

  test("they are created, listed, used, current, refused when created again and deleted like any other", () => {
    // us-ts-a, made in the test before, is current.
    for (const [i, name] of names.entries())
      expect(create(file, name, `C${i}`).out).toBe(`Context "${name}" created.\n`);
    expect(listed(file)).toEqual(["__proto__", "constructor", "hasOwnProperty", "toString", "*us-ts-a"]);
    expect(create(file, "__proto__").err).toContain('context "__proto__" already exists');
    for (const name of names) {
      expect(run(["context", "use", name], file).out).toBe(`Switched to context "${name}".\n`);
      expect(run(["context", "current"], file).out).toBe(`${name}\n`);
    }
    expect(run(["context", "use", "__proto__"], file).code).toBe(0);
    expect(listed(file)).toContain("*__proto__");
    expect(run(["context", "delete", "__proto__"], file).out).toBe('Context "__proto__" deleted.\n');
    expect(run(["context", "current"], file).err).toContain("no current context");
    expect(listed(file)).toEqual(["constructor", "hasOwnProperty", "toString", "us-ts-a"]);
    expect(readFileSync(file, "utf8")).not.toContain("__proto__");
  });
});

describe("svc context: never contexts without a current one, silently", () => {
  const file = join(dir, "first.yaml");
  const log = join(dir, "first-audit.log");
  const kubeconfig = join(dir, "kubeconfig.yaml");

  test("the first context created becomes current, and the switch is audited", () => {
    writeFileSync(file, `auditLog: {enabled: true, path: ${log}, level: info}\n`);
    expect(create(file, "us-ts-a").out).toBe(
      'Context "us-ts-a" created. It is the current context (there was none).\n',
    );
    expect(create(file, "us-ts-b", "B").out).toBe('Context "us-ts-b" created.\n');
    expect(run(["context", "current"], file).out).toBe("us-ts-a\n");
    const [entry] = readFileSync(log, "utf8")
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(entry).toMatchObject({
      context: "us-ts-a",
      compartment: "US-TS-A",
      command: ["svc", "context", "create", "us-ts-a"],
      decision: "allowed",
      previousContext: "",
    });
  });

  test("with contexts and none current, a command that reaches the cluster's objects stops and says what to do", () => {
    expect(run(["context", "delete", "us-ts-a"], file).code).toBe(0);
    writeFileSync(kubeconfig, "apiVersion: v1\nkind: Config\ncontexts: [{name: k, context: {cluster: c}}]\n");
    const env = { KUBECONFIG: kubeconfig };
    for (const args of [
      ["apply", "-f", "deployment.yaml"],
      ["get", "pods"],
      ["-n", "shared", "delete", "cm", "x"],
      ["exec", "pod", "--", "true"],
      ["scale", "deploy/x", "--replicas=2"],
      ["create", "secret", "generic", "s"],
      ["auth", "whoami"],
      ["frobnicate"],
    ]) {
      const r = run(args, file, env);
      expect({ args, code: r.code, out: r.out }).toEqual({ args, code: 1, out: "" });
      expect(r.err).toMatch(
        /^svc: no current context: svc will not run kubectl \S+.* outside a compartment; choose one with svc context use <name> \(contexts: us-ts-b\)\n$/,
      );
    }
    // The refusal is audited, in no context.
    const last = JSON.parse(readFileSync(log, "utf8").trimEnd().split("\n").at(-1) as string);
    expect(last).toMatchObject({ context: "", command: ["svc", "frobnicate"], decision: "error" });
    // What reaches no compartment's objects runs as plain kubectl.
    const contexts = run(["config", "get-contexts", "-o", "name"], file, env);
    expect({ code: contexts.code, out: contexts.out }).toEqual({ code: 0, out: "k\n" });
    expect(run(["get", "--help"], file, env).code).toBe(0);
    // A context made current again: commands run in it.
    expect(run(["context", "use", "us-ts-b"], file).code).toBe(0);
    expect(run(["config", "current-context"], file, env).err).not.toContain("no current context");
  });
});

describe("svc context use: the audit log", () => {
  test("a switch is recorded with the previous context; a failed one as an error", () => {
    const file = join(dir, "audited.yaml");
    const log = join(dir, "audit", "audit.log");
    writeFileSync(
      file,
      `currentContext: us-ts-alpha
contexts:
  us-ts-alpha: {country: US, sensitivity: TS, compartment: ALPHA, kubeContext: k1}
  uk-s-bravo: {country: UK, sensitivity: S, compartment: BRAVO, kubeContext: k2}
auditLog: {enabled: true, path: ${log}, level: info}
`,
    );
    expect(run(["context", "use", "uk-s-bravo"], file, { USER: "alice" }).code).toBe(0);
    expect(run(["context", "use", "jp-c-gamma"], file, { USER: "alice" }).code).toBe(1);
    const entries = readFileSync(log, "utf8")
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(entries).toEqual([
      {
        time: expect.any(String),
        level: "info",
        user: "alice",
        context: "uk-s-bravo",
        compartment: "UK-S-BRAVO",
        command: ["svc", "context", "use", "uk-s-bravo"],
        targets: ["uk-s-bravo"],
        decision: "allowed",
        exitStatus: 0,
        previousContext: "us-ts-alpha",
      },
      {
        time: expect.any(String),
        level: "error",
        user: "alice",
        context: "uk-s-bravo",
        compartment: "UK-S-BRAVO",
        command: ["svc", "context", "use", "jp-c-gamma"],
        targets: ["jp-c-gamma"],
        decision: "error",
        exitStatus: 1,
        previousContext: "uk-s-bravo",
      },
    ]);
  });
});

describe("a compartment switch through the environment that the configuration forbids", () => {
  test("is refused before kubectl runs, and the refusal is in the audit log", () => {
    const file = join(dir, "strict.yaml");
    const log = join(dir, "strict-audit.log");
    writeFileSync(
      file,
      `currentContext: us-ts-alpha
requireExplicitContextSwitch: true
contexts:
  us-ts-alpha: {country: US, sensitivity: TS, compartment: ALPHA, kubeContext: k}
auditLog: {enabled: true, path: ${log}, level: info}
`,
    );
    const r = run(["get", "pods"], file, { USER: "alice", SVC_COMPARTMENT: "BRAVO" });
    expect({ code: r.code, out: r.out }).toEqual({ code: 1, out: "" });
    expect(r.err).toContain(
      "SVC_COMPARTMENT=BRAVO would change the compartment of context us-ts-alpha (ALPHA)",
    );
    const entries = readFileSync(log, "utf8")
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(entries).toEqual([
      expect.objectContaining({
        user: "alice",
        context: "us-ts-alpha",
        compartment: "US-TS-ALPHA",
        command: ["svc", "get", "pods"],
        decision: "refused",
        exitStatus: 1,
      }),
    ]);
  });
});
