import { beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { X509Source } from "../../lib/spiffe/x509-source.ts";
import { compiled } from "../support/compiled.ts";
import { startDevApi, tempDir } from "../support/dev-api.ts";
import { ROOT } from "../support/proc.ts";

/** The compiled executables, as users run them (built by beforeAll below). */
const run = (cmd: string[], env: Record<string, string> = {}) => {
  const r = Bun.spawnSync(cmd, { cwd: ROOT, env: { ...process.env, ...env } });
  return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
};

// make build, once per test process: it rebuilds only what changed.
beforeAll(() => {
  compiled("svc");
}, 120_000);

describe("dist/svc", () => {
  test("version -o json carries the injected build information", () => {
    const r = run(["dist/svc", "version", "-o", "json"]);
    expect(r.code).toBe(0);
    const info = JSON.parse(r.out);
    expect(info.version).toBe(JSON.parse(readFileSync(`${ROOT}/package.json`, "utf8")).version);
    const head = run(["git", "rev-parse", "--short=12", "HEAD"]).out.trim();
    if (head) expect(info.commit).toBe(head);
    expect(info.date).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
  });

  test("version prints one human line", () => {
    expect(run(["dist/svc", "version"]).out).toMatch(
      /^svc version \d+\.\d+\.\d+ \(commit \S+, built \S+, bun [\d.]+, linux\/\w+\)\n$/,
    );
  });

  test("an unknown flag is an error naming the flag and the allowed ones, without a stack trace", () => {
    const r = run(["dist/svc", "context", "list", "--bogus"]);
    expect(r.code).toBe(1);
    expect(r.err).toBe("svc: unknown flag --bogus (allowed: --output; see --help)\n");
  });

  test("curl loads its X.509 code in the binary: a server outside the service fails validation with exit 2", async () => {
    const dir = tempDir();
    const api = await startDevApi({
      socketPath: join(dir, "a.sock"),
      spiffeIds: ["spiffe://example.org/ns/a/sa/caller"],
      caDir: join(dir, "ca"),
    });
    const plain = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("hello\n") });
    try {
      const args = ["--spiffe-socket-path", api.socket, `http://127.0.0.1:${plain.port}/`];
      const p = Bun.spawn(["dist/svc", "curl", ...args], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
      const [out, err, code] = await Promise.all([
        new Response(p.stdout).text(),
        new Response(p.stderr).text(),
        p.exited,
      ]);
      expect(err).toContain("but the response has no Svc-Workload-ID header");
      expect(code).toBe(2);
      expect(out).toBe("");
    } finally {
      plain.stop(true);
      await api.proc.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("dev workload-api refuses a socket another one serves, and leaves it to that one; a dead one's is taken", async () => {
    const dir = tempDir();
    const socket = join(dir, "agent.sock");
    const first = await startDevApi({
      socketPath: socket,
      spiffeIds: ["spiffe://example.org/ns/a/sa/first"],
      caDir: join(dir, "ca"),
    });
    try {
      const args = [
        "dev",
        "workload-api",
        "--socket",
        `unix://${socket}`,
        "--spiffe-id",
        "spiffe://example.org/x",
      ];
      const second = run(["dist/svc", ...args, "--ca-dir", join(dir, "ca2")]);
      expect({ code: second.code, err: second.err }).toEqual({
        code: 1,
        err: `svc: cannot listen on unix://${socket}: address already in use (another process serves it); stop it or choose another path\n`,
      });
      // The first still serves, at its socket.
      const source = await X509Source.open({ address: first.socket });
      expect(source.getX509Svid().id.uri).toBe("spiffe://example.org/ns/a/sa/first");
      source.close();
      const file = join(dir, "file");
      writeFileSync(file, "");
      expect(
        run([
          "dist/svc",
          "dev",
          "workload-api",
          "--socket",
          `unix://${file}`,
          "--spiffe-id",
          "spiffe://example.org/x",
          "--ca-dir",
          join(dir, "ca3"),
        ]).err,
      ).toBe(`svc: cannot listen on unix://${file}: it exists and is not a socket; choose another path\n`);
    } finally {
      // Killed: its socket stays behind, served by nobody.
      await first.proc.stop("SIGKILL");
    }
    const next = await startDevApi({
      socketPath: socket,
      spiffeIds: ["spiffe://example.org/ns/a/sa/next"],
      caDir: join(dir, "ca"),
    });
    const source = await X509Source.open({ address: next.socket });
    expect(source.getX509Svid().id.uri).toBe("spiffe://example.org/ns/a/sa/next");
    source.close();
    await next.proc.stop();
    expect(existsSync(socket)).toBe(false);
    rmSync(dir, { recursive: true, force: true });
  });

  test("help is plain text off a terminal, under the command's whole name, and only for a command that exists", () => {
    const help = run(["dist/svc", "context", "create", "--help"]);
    expect(help.code).toBe(0);
    expect(help.out).not.toContain("\x1b[");
    expect(help.out).toStartWith(
      "Creates a context (svc context create)\n\nUSAGE svc context create [OPTIONS] <NAME> --country=",
    );
    for (const args of [
      ["context", "lst", "--help"],
      ["context", "lst"],
    ]) {
      const r = run(["dist/svc", ...args]);
      expect({ args, code: r.code, out: r.out, err: r.err }).toEqual({
        args,
        code: 1,
        out: "",
        err: 'svc: unknown command "lst" for svc context (allowed: list, use, current, create, delete; see svc context --help)\n',
      });
    }
    expect(run(["dist/svc", "context"]).err).toBe(
      "svc: a command is required after svc context (allowed: list, use, current, create, delete; see svc context --help)\n",
    );
  });

  test("a command line that lacks arguments names every one of them in one line, without the help", () => {
    const dir = tempDir();
    const env = { SVC_CONFIG: join(dir, "config.yaml") };
    const none = run(["dist/svc", "context", "create"], env);
    expect({ code: none.code, out: none.out, err: none.err }).toEqual({
      code: 1,
      out: "",
      err: "svc: missing NAME, --country, --sensitivity, --compartment, --kube-context for svc context create (see svc context create --help)\n",
    });
    expect(run(["dist/svc", "context", "create", "x", "--country", "us"], env).err).toBe(
      "svc: missing --sensitivity, --compartment, --kube-context for svc context create (see svc context create --help)\n",
    );
    rmSync(dir, { recursive: true, force: true });
  });

  test("every listing command takes -o json|yaml", () => {
    const dir = tempDir();
    const env = { SVC_CONFIG: join(dir, "config.yaml"), KUBECONFIG: join(dir, "kubeconfig") };
    writeFileSync(env.KUBECONFIG, "apiVersion: v1\nkind: Config\ncontexts: [{name: k, context: {}}]\n");
    run(
      [
        "dist/svc",
        "context",
        "create",
        "us-ts-a",
        "--country=US",
        "--sensitivity=TS",
        "--compartment=A",
        "--kube-context=k",
      ],
      env,
    );
    const list = run(["dist/svc", "context", "list", "-o", "json"], env);
    expect(JSON.parse(list.out)).toEqual([
      {
        name: "us-ts-a",
        current: true,
        country: "US",
        sensitivity: "TS",
        compartment: "A",
        kubeContext: "k",
      },
    ]);
    expect(run(["dist/svc", "context", "list", "-o", "yaml"], env).out).toStartWith(
      "- name: us-ts-a\n  current: true\n",
    );
    expect(JSON.parse(run(["dist/svc", "context", "current", "-o", "json"], env).out).name).toBe("us-ts-a");
    expect(run(["dist/svc", "version", "-o", "yaml"]).out).toStartWith("version: ");
    rmSync(dir, { recursive: true, force: true });
  });

  test("help says what is kubectl's, and kubectl's help and completion know svc's flags", () => {
    const dir = tempDir();
    // No configuration: svc is plain kubectl, and still tells its own flags.
    const env = { SVC_CONFIG: "", HOME: dir };
    expect(run(["dist/svc", "--help"], env).out).toContain(
      "Every other command is kubectl's, run in the current compartment context and checked by svc",
    );
    const get = run(["dist/svc", "get", "--help"], env);
    expect(get.code).toBe(0);
    expect(get.out).toContain("Display one or many resources");
    expect(get.out).toEndWith(
      "\nsvc adds:\n    --current-compartment: only objects of the current compartment\n    --compartment: only objects of this compartment label, such as UK-S-BRAVO\n    --exclude-current-compartment: only objects of other compartments\n    --filter-compartment: only objects of the current compartment, or of =LABEL\n    --force: override a compartment refusal, where the cluster allows you to (the override is logged)\n",
    );
    expect(run(["dist/svc", "exec", "--help"], env).out).toEndWith(
      "\nsvc adds:\n    --force: override a compartment refusal, where the cluster allows you to (the override is logged)\n",
    );
    expect(run(["dist/svc", "version", "--client", "--help"], env).out).not.toContain("svc adds");
    const completed = run(["dist/svc", "__complete", "get", "pods", "--comp"], env).out.split("\n");
    expect(completed).toContain("--compartment\tonly objects of this compartment label, such as UK-S-BRAVO");
    rmSync(dir, { recursive: true, force: true });
  });

  test("what a new user's habits land on: no silent plain kubectl, values checked, refusals audited", () => {
    const dir = tempDir();
    const log = join(dir, "audit.log");
    const env = { SVC_CONFIG: join(dir, "config.yaml"), KUBECONFIG: join(dir, "kubeconfig") };
    writeFileSync(env.KUBECONFIG, "apiVersion: v1\nkind: Config\ncontexts: [{name: k, context: {}}]\n");
    writeFileSync(
      env.SVC_CONFIG,
      `auditLog: {enabled: true, path: ${log}, level: info}\nrequireExplicitContextSwitch: true\n`,
    );
    const create = (...flags: string[]) =>
      run(["dist/svc", "context", "create", "us-ts-a", "--country=US", "--compartment=A", ...flags], env);
    // Values svc can know are checked, every problem in one line.
    expect(create("--sensitivity=TOPSECRET", "--kube-context=nope").err).toBe(
      'svc: --sensitivity "TOPSECRET" is not a sensitivity (allowed: U, C, S or TS); --kube-context "nope": no such context in your kubeconfig (known: k); add it with kubectl config set-context, or name one of these\n',
    );
    expect(create("--sensitivity=TS", "--kube-context=k").out).toContain("It is the current context");
    // An environment switch the configuration forbids: refused before kubectl, and audited.
    const switched = run(["dist/svc", "get", "pods"], { ...env, SVC_COMPARTMENT: "B" });
    expect({ code: switched.code, out: switched.out }).toEqual({ code: 1, out: "" });
    expect(JSON.parse(readFileSync(log, "utf8").trimEnd().split("\n").at(-1) as string)).toMatchObject({
      command: ["svc", "get", "pods"],
      decision: "refused",
    });
    // Contexts, none current (the current one deleted): kubectl commands stop and say what to do.
    run(
      [
        "dist/svc",
        "context",
        "create",
        "us-ts-b",
        "--country=US",
        "--sensitivity=TS",
        "--compartment=B",
        "--kube-context=k",
      ],
      env,
    );
    run(["dist/svc", "context", "delete", "us-ts-a"], env);
    const none = run(["dist/svc", "apply", "-f", "x.yaml"], env);
    expect({ code: none.code, err: none.err }).toEqual({
      code: 1,
      err: "svc: no current context: svc will not run kubectl apply outside a compartment; choose one with svc context use <name> (contexts: us-ts-b)\n",
    });
    rmSync(dir, { recursive: true, force: true });
  });

  test("a bad output format names the allowed ones", () => {
    expect(run(["dist/svc", "version", "-o", "xml"]).err).toBe(
      'svc: --output: unknown format "xml" (allowed: json, yaml)\n',
    );
  });
});

describe("dist/svc-proxy", () => {
  test("-help lists the flags of docs/proxy-configuration.md", () => {
    const r = run(["dist/svc-proxy", "-help"]);
    expect(r.code).toBe(0);
    for (const flag of ["-config", "-version", "-zap-log-level", "-zap-encoder", "-zap-devel"])
      expect(r.out).toContain(`  ${flag}`);
  });

  test("-version prints the injected version", () => {
    expect(run(["dist/svc-proxy", "-version"]).out).toMatch(/^svc-proxy version \d+\.\d+\.\d+ \(commit /);
  });

  test("without -config or SVC_PROXY_CONFIG it exits non-zero saying what to pass", () => {
    const r = run(["dist/svc-proxy"], { SVC_PROXY_CONFIG: "" });
    expect(r.code).toBe(1);
    expect(r.err).toBe(
      "svc-proxy: no configuration: pass -config <path> or set SVC_PROXY_CONFIG to YAML or JSON text (see -help)\n",
    );
  });

  test("a metricsAddr another process holds is refused naming the setting", () => {
    const holder = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("") });
    try {
      const config = JSON.stringify({
        spiffe: { workload_socket_path: "unix:///nonexistent/agent.sock" },
        metricsAddr: `127.0.0.1:${holder.port}`,
        listeners: [
          { name: "l", address: "127.0.0.1:0", mode: "client", target: { url: "http://127.0.0.1:9" } },
        ],
      });
      const r = run(["dist/svc-proxy"], { SVC_PROXY_CONFIG: config });
      expect(r.code).toBe(1);
      expect(r.err).toEndWith(
        `svc-proxy: metricsAddr: cannot listen on 127.0.0.1:${holder.port}: address already in use (choose a free port, or "0" to serve no metrics)\n`,
      );
    } finally {
      holder.stop(true);
    }
  });

  test("-check names every problem and every warning of a file at once", () => {
    const dir = tempDir();
    const file = join(dir, "bad.yaml");
    writeFileSync(
      file,
      `spiffe: {endpoint_socket: unix:///run/spire/agent.sock}
metricsAddr: "127.0.0.1:99999"
listeners:
  - {name: web, address: "127.0.0.1:99999", mode: client, target: {url: "https://a:1", spiffe_ids: ["(x"]}}
  - {name: web, address: "127.0.0.1:1", mode: server, sorce: {}, target: {url: "http://b:1"}, timeouts: {read: "-5s"}}
  - {name: web, address: localhost, mode: sideways, target: {url: "http://c:1"}}
`,
    );
    const r = run(["dist/svc-proxy", "-check", "-config", file]);
    expect(r.code).toBe(1);
    expect(r.err).toStartWith("svc-proxy: invalid configuration (9 problems, 3 warnings):\n");
    for (const path of [
      "spiffe.workload_socket_path: required field is missing",
      "listeners[2].mode:",
      "metricsAddr:",
      "listeners[0].address:",
      "listeners[0].target.spiffe_ids[0]:",
      "listeners[1].name: duplicate",
      "listeners[1].timeouts.read:",
      "listeners[2].name: duplicate",
      "listeners[2].address:",
      "warning: spiffe.endpoint_socket: unknown field",
      "warning: listeners[1].sorce: unknown field",
      "warning: listeners[1].source.spiffe_ids: empty",
    ])
      expect(r.err).toContain(`\n  ${path}`);
    rmSync(dir, { recursive: true, force: true });
  });

  test("an undefined flag is refused the way Go's flag package does", () => {
    const r = run(["dist/svc-proxy", "-cfg", "x"]);
    expect(r.code).toBe(1);
    expect(r.err).toBe("svc-proxy: flag provided but not defined: -cfg (see -help)\n");
  });
});
