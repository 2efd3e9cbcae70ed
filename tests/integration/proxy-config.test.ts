import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../support/dev-api.ts";
import { BUN, ROOT } from "../support/proc.ts";

/** svc-proxy's configuration sources and -check, as a process (docs/proxy-configuration.md). */
const dir = tempDir();
const yamlDoc = (name: string) => `spiffe:
  workload_socket_path: unix:///run/spire/agent.sock
listeners:
  - name: ${name}
    address: 127.0.0.1:8080
    mode: client
    target:
      url: https://api:8443
`;

function proxy(args: string[], env: Record<string, string | undefined> = {}) {
  const r = Bun.spawnSync([BUN, "cmd/svc-proxy.ts", ...args], {
    cwd: ROOT,
    env: { ...process.env, SVC_PROXY_CONFIG: "", ...env } as Record<string, string>,
  });
  return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
}

describe("svc-proxy configuration sources", () => {
  const file = join(dir, "proxy.yaml");
  writeFileSync(file, yamlDoc("from-file"));

  test("-config reads YAML; -check prints it with defaults and exits 0", () => {
    const r = proxy(["-config", file, "-check"]);
    expect(r.code).toBe(0);
    expect(r.out).toStartWith(`# ${file}: valid (1 listener)\n`);
    expect(r.out).toContain("name: from-file");
    expect(r.out).toContain("read: 15s");
    expect(r.out).toContain("metricsAddr: :7600");
  });

  test("a nonempty -config wins over SVC_PROXY_CONFIG", () => {
    expect(proxy(["-config", file, "-check"], { SVC_PROXY_CONFIG: yamlDoc("from-env") }).out).toContain(
      "name: from-file",
    );
  });

  test("SVC_PROXY_CONFIG holds YAML or JSON text", () => {
    expect(proxy(["-check"], { SVC_PROXY_CONFIG: yamlDoc("from-env") }).out).toContain("name: from-env");
    const json = JSON.stringify({
      spiffe: { workload_socket_path: "unix:///a.sock" },
      listeners: [{ name: "json", address: ":1", mode: "server", target: { url: "http://127.0.0.1:80" } }],
    });
    const r = proxy(["-check"], { SVC_PROXY_CONFIG: json });
    expect(r.code).toBe(0);
    expect(r.out).toContain("name: json");
  });

  test("a file that cannot be read is an error, with no fall-back to the variable", () => {
    const r = proxy(["-config", join(dir, "missing.yaml")], { SVC_PROXY_CONFIG: yamlDoc("from-env") });
    expect(r.code).toBe(1);
    expect(r.err).toBe(
      `svc-proxy: -config ${join(dir, "missing.yaml")}: cannot read the configuration file: no such file (SVC_PROXY_CONFIG is not used when -config is given)\n`,
    );
  });

  test("neither source: exit non-zero saying what to pass", () => {
    const r = proxy([]);
    expect(r.code).toBe(1);
    expect(r.err).toContain("no configuration: pass -config <path> or set SVC_PROXY_CONFIG");
  });

  test("a YAML syntax error names the source, line and column", () => {
    const r = proxy(["-check"], { SVC_PROXY_CONFIG: "listeners: [\n  - name: x\n" });
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/^svc-proxy: SVC_PROXY_CONFIG: not valid YAML or JSON at line \d+, column \d+: /);
  });

  test("validation errors all at once, exit non-zero, no stack trace", () => {
    const bad = yamlDoc("x").replace("mode: client", "mode: sidecar").replace("127.0.0.1:8080", "8080");
    const r = proxy(["-check"], { SVC_PROXY_CONFIG: bad });
    expect(r.code).toBe(1);
    expect(r.err).toBe(
      'svc-proxy: invalid configuration (2 problems):\n  listeners[0].address: expected a host:port bind address, got 8080\n  listeners[0].mode: invalid value "sidecar" (allowed: client, server, central)\n',
    );
  });

  test("unknown fields are logged as warnings, in the chosen encoding", () => {
    const doc = yamlDoc("x").replace("    target:", "    sorce:\n      spiffe_ids: []\n    target:");
    const json = proxy(["-check"], { SVC_PROXY_CONFIG: doc });
    expect(json.code).toBe(0);
    const line = JSON.parse(json.err.trim().split("\n")[0] as string);
    expect(line).toMatchObject({
      level: "warn",
      msg: "listeners[0].sorce: unknown field, ignored (check its spelling)",
      config: "SVC_PROXY_CONFIG",
    });
    const console = proxy(["-check", "-zap-encoder=console"], { SVC_PROXY_CONFIG: doc });
    expect(console.err).toMatch(
      /^\S+\tWARN\tlisteners\[0\]\.sorce: unknown field, ignored \(check its spelling\)\t\{"config":"SVC_PROXY_CONFIG"\}\n$/,
    );
  });
});
