import { afterAll, describe, expect, test } from "bun:test";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../support/dev-api.ts";
import { BUN, ROOT } from "../support/proc.ts";

/** `svc context …` as a user runs it, on a configuration file of its own (SVC_CONFIG). */
const dir = tempDir("svc-context-");
const config = join(dir, "config.yaml");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function svc(...args: string[]) {
  const r = Bun.spawnSync([BUN, "cmd/svc.ts", "context", ...args], {
    cwd: ROOT,
    env: { ...process.env, SVC_CONFIG: config },
  });
  return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
}

describe("svc context", () => {
  test("create, use, current and list with the columns of 4.5", () => {
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
    ).toContain('--country "U S": letters and digits only');
    writeFileSync(config, "contexts:\n  a: {country: US}\n");
    const r = svc("list");
    expect(r.code).toBe(1);
    expect(r.err).toContain(`${config}:2: contexts.a.sensitivity: is required`);
  });
});
