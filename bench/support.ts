import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Subprocess, spawn } from "bun";
import { peer as peerPath } from "../tests/e2e/testbed/peers.ts";
import { freePort, waitForPort } from "../tests/support/net.ts";

/**
 * What the proxy benchmarks share: a scratch directory, the processes they start (stopped together), one
 * development Workload API per workload (one CA, one trust domain), and svc-proxy and ghostunnel started
 * against those sockets. The built binaries are used (`make build`).
 */
export const ROOT = new URL("..", import.meta.url).pathname;
export const benchId = (sa: string) => `spiffe://bench.svc/ns/bench/sa/${sa}`;
export const exactId = (sa: string) => `^${benchId(sa).replace(/\./g, "\\.")}$`;

export class BenchRun {
  readonly dir = mkdtempSync(join(tmpdir(), "svc-bench-"));
  private readonly procs: Subprocess[] = [];

  constructor() {
    if (!existsSync(join(ROOT, "dist/svc-proxy"))) throw new Error("run make build first");
  }

  start(cmd: string[], env: Record<string, string> = {}, log = "/dev/null"): Subprocess {
    const p = spawn(cmd, { env: { ...process.env, ...env }, stdout: "ignore", stderr: Bun.file(log) });
    this.procs.push(p);
    return p;
  }

  socket(sa: string): string {
    return join(this.dir, `${sa}.sock`);
  }

  /** `svc dev workload-api` for each workload, waiting (bounded) for its socket. */
  async workloadApis(names: string[]): Promise<void> {
    for (const sa of names) {
      this.start([
        join(ROOT, "dist/svc"),
        "dev",
        "workload-api",
        "--socket",
        this.socket(sa),
        "--spiffe-id",
        benchId(sa),
        "--ca-dir",
        join(this.dir, "ca"),
      ]);
      for (let i = 0; i < 100 && !existsSync(this.socket(sa)); i++) await Bun.sleep(100);
    }
  }

  /** dist/svc-proxy (or `binary`) as `sa` with one listener, logging warnings only. */
  svcProxy(sa: string, listener: object, log?: string, binary = join(ROOT, "dist/svc-proxy")): Subprocess {
    const config = {
      spiffe: { workload_socket_path: `unix://${this.socket(sa)}` },
      metricsAddr: "0",
      listeners: [listener],
    };
    return this.start(
      [binary, "-zap-log-level=warn"],
      { SVC_PROXY_CONFIG: JSON.stringify(config) },
      log && join(this.dir, log),
    );
  }

  /**
   * A client→server svc-proxy pair in front of `target` (a plaintext port): the server listener admits the
   * client's ID, the client listener (with `middlewares`) verifies the server's over SPIFFE mTLS. Resolves
   * once both listen, with the client listener's port and the two processes.
   */
  async svcPair(o: {
    protocol: "tcp" | "mqtt";
    target: number;
    binary?: string;
    middlewares?: object[];
  }): Promise<{ port: number; procs: Subprocess[] }> {
    const [server, client] = [await freePort(), await freePort()];
    const [plain, tls] = o.protocol === "tcp" ? ["tcp", "tls"] : ["mqtt", "mqtts"];
    const proxy = (sa: string, listener: object) =>
      this.svcProxy(sa, { name: "l", protocol: o.protocol, ...listener }, undefined, o.binary);
    const procs = [
      proxy("server", {
        address: `127.0.0.1:${server}`,
        mode: "server",
        target: { url: `${plain}://127.0.0.1:${o.target}` },
        source: { spiffe_ids: [exactId("client")] },
      }),
      proxy("client", {
        address: `127.0.0.1:${client}`,
        mode: "client",
        target: { url: `${tls}://127.0.0.1:${server}`, spiffe_ids: [exactId("server")] },
        ...(o.middlewares ? { middlewares: o.middlewares } : {}),
      }),
    ];
    for (const p of [server, client]) await waitForPort(p);
    return { port: client, procs };
  }

  /** ghostunnel as `sa`: a server admits `peer`'s ID, a client verifies it. */
  ghostunnel(
    mode: "client" | "server",
    sa: string,
    peer: string,
    listen: number,
    target: number,
    log?: string,
  ): Subprocess {
    return this.start(
      [
        peerPath("ghostunnel"),
        mode,
        `--listen=127.0.0.1:${listen}`,
        `--target=127.0.0.1:${target}`,
        `--use-workload-api-addr=unix://${this.socket(sa)}`,
        `${mode === "server" ? "--allow-uri" : "--verify-uri"}=${benchId(peer)}`,
        "--quiet=all",
      ],
      {},
      log && join(this.dir, log),
    );
  }

  /** A ghostunnel client→server pair in front of `target`, as svcPair: the client listener's port and both processes. */
  async ghostunnelPair(target: number): Promise<{ port: number; procs: Subprocess[] }> {
    const [server, client] = [await freePort(), await freePort()];
    // Client hop first, as every pair of the benchmarks lists its hops.
    const procs = [
      this.ghostunnel("client", "client", "server", client, server),
      this.ghostunnel("server", "server", "client", server, target),
    ];
    for (const p of [server, client]) await waitForPort(p);
    return { port: client, procs };
  }

  /**
   * One process of a hop-variants script (`script`, from the repository's root) per mode, each listening
   * on a free port in front of `target`: its name, port and process, once all listen.
   */
  async hopVariants(
    script: string,
    modes: string[],
    target: number,
  ): Promise<[string, number, Subprocess][]> {
    const out: [string, number, Subprocess][] = [];
    for (const mode of modes) {
      const port = await freePort();
      out.push([
        `Bun socket hop: ${mode}`,
        port,
        this.start([process.execPath, join(ROOT, script), mode, String(port), String(target)]),
      ]);
    }
    for (const [, port] of out) await waitForPort(port);
    return out;
  }

  /**
   * A client→server pair of Bun TLS byte relays (bench/relay-ceiling.ts) in front of `target`, with
   * certificates of this run's development CA: the ceiling of a relay on Bun's own sockets.
   */
  async byteRelayPair(target: number): Promise<{ port: number; procs: Subprocess[] }> {
    await this.byteRelayCerts();
    const [server, client] = [await freePort(), await freePort()];
    const procs = [
      this.byteRelay("client", client, server, "client"),
      this.byteRelay("server", server, target, "server"),
    ];
    for (const p of [server, client]) await waitForPort(p);
    return { port: client, procs };
  }

  /** One byte relay of bench/relay-ceiling.ts, as `sa`. */
  byteRelay(mode: "client" | "server", listen: number, target: number, sa: string): Subprocess {
    return this.start([
      process.execPath,
      join(ROOT, "bench/relay-ceiling.ts"),
      mode,
      String(listen),
      String(target),
      join(this.dir, `${sa}.pem`),
      join(this.dir, `${sa}.key`),
      join(this.dir, "ca.pem"),
    ]);
  }

  /** The byte relays' certificates, from a development CA of the benchmarks' trust domain (once). */
  async byteRelayCerts(): Promise<void> {
    if (existsSync(join(this.dir, "ca.pem"))) return;
    const { DevCa } = await import("../lib/dev/ca.ts");
    const { derToPem } = await import("../lib/spiffe/cert.ts");
    const ca = await DevCa.open("bench.svc", join(this.dir, "ca"));
    for (const sa of ["client", "server"]) {
      const svid = await ca.issueX509Svid(benchId(sa), 3_600_000);
      writeFileSync(join(this.dir, `${sa}.pem`), derToPem(svid.certDer));
      writeFileSync(join(this.dir, `${sa}.key`), derToPem(svid.keyDer, "PRIVATE KEY"));
    }
    writeFileSync(join(this.dir, "ca.pem"), derToPem(ca.caDer));
  }

  async stop(): Promise<void> {
    for (const p of this.procs) p.kill("SIGTERM");
    await Promise.all(this.procs.map((p) => p.exited));
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Prints a benchmark's Markdown report and writes it to `out` when given. */
export function report(lines: string[], out?: string): void {
  const table = lines.join("\n");
  process.stdout.write(table);
  if (out) writeFileSync(out, table);
}
