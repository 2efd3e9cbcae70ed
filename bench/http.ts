/**
 * HTTP through a client→server proxy pair: svc-proxy against ghostunnel (an independent SPIFFE-aware TLS
 * relay) and against a direct connection, in the same run, with the same upstream and SVIDs from the same
 * development Workload API. wrk drives 1, 16 and 64 connections; reports requests/s, p50/p99 latency and
 * the proxies' peak RSS, and the ratios. Needs `make build`, wrk, and ghostunnel (`make peers`).
 *
 *   bun bench/http.ts [--seconds 10] [--out bench/results/http.md]
 */

import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { type Subprocess, spawn, spawnSync } from "bun";
import { peers } from "../tests/e2e/testbed/peers.ts";
import { freePort, waitForPort } from "../tests/support/net.ts";

const { values: o } = parseArgs({
  options: { seconds: { type: "string", default: "10" }, out: { type: "string" } },
});
const ROOT = new URL("..", import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), "svc-bench-"));
const procs: Subprocess[] = [];
const id = (sa: string) => `spiffe://bench.svc/ns/bench/sa/${sa}`;
const CONNECTIONS = [1, 16, 64];

function start(cmd: string[], env: Record<string, string> = {}, log = "/dev/null"): Subprocess {
  const p = spawn(cmd, { env: { ...process.env, ...env }, stdout: "ignore", stderr: Bun.file(log) });
  procs.push(p);
  return p;
}

/** Peak resident set size in MB of a process (VmHWM). */
function peakRssMb(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) / 1024 : Number.NaN;
}

interface Result {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
}

// Asynchronous: the upstream runs in this process and must keep answering while wrk runs.
async function wrk(port: number, connections: number): Promise<Result> {
  const args = [
    "-t",
    connections > 1 ? "2" : "1",
    "-c",
    String(connections),
    "-d",
    `${o.seconds}s`,
    "--latency",
  ];
  const p = spawn(["wrk", ...args, `http://127.0.0.1:${port}/`], { stdout: "pipe" });
  const out = await new Response(p.stdout).text();
  await p.exited;
  const ms = (label: string) => {
    const m = new RegExp(`^\\s*${label}\\s+([\\d.]+)(us|ms|s)$`, "m").exec(out);
    if (!m) return Number.NaN;
    return Number(m[1]) * ({ us: 0.001, ms: 1, s: 1000 }[m[2] as "us" | "ms" | "s"] ?? 1);
  };
  const errors = /Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1];
  const socketErrors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  return {
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1]),
    p50: ms("50%"),
    p99: ms("99%"),
    errors:
      Number(errors ?? 0) + (socketErrors ? socketErrors.slice(1).reduce((a, b) => a + Number(b), 0) : 0),
  };
}

try {
  if (!existsSync(join(ROOT, "dist/svc-proxy"))) throw new Error("run make build first");
  const ghostunnel = peers().ghostunnel;
  for (const sa of ["client", "server"]) {
    start([
      join(ROOT, "dist/svc"),
      "dev",
      "workload-api",
      "--socket",
      join(dir, `${sa}.sock`),
      "--spiffe-id",
      id(sa),
      "--ca-dir",
      join(dir, "ca"),
    ]);
    for (let i = 0; i < 100 && !existsSync(join(dir, `${sa}.sock`)); i++) await Bun.sleep(100);
  }
  // Certificates for the relay-ceiling pair, from the same development CA.
  const { DevCa } = await import("../lib/spiffe/dev-ca.ts");
  const { derToPem } = await import("../lib/spiffe/cert.ts");
  const ca = await DevCa.open("bench.svc", join(dir, "ca"));
  for (const sa of ["client", "server"]) {
    const svid = await ca.issueX509Svid(id(sa), 3_600_000);
    writeFileSync(join(dir, `${sa}.pem`), derToPem(svid.certDer));
    writeFileSync(join(dir, `${sa}.key`), derToPem(svid.keyDer, "PRIVATE KEY"));
  }
  writeFileSync(join(dir, "ca.pem"), derToPem(ca.caDer));
  const body = "x".repeat(256);
  const upstream = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response(body) });
  const ports = Object.fromEntries(
    await Promise.all(
      [
        "svcServer",
        "svcClient",
        "ghServer",
        "ghClient",
        "relayServer",
        "relayClient",
        "ghToSvc",
        "svcToGh",
      ].map(async (k) => [k, await freePort()]),
    ),
  );

  const cfg = (sa: string, listener: object) =>
    JSON.stringify({
      spiffe: { workload_socket_path: `unix://${join(dir, `${sa}.sock`)}` },
      metricsAddr: "0",
      listeners: [listener],
    });
  const svcServer = start(
    [join(ROOT, "dist/svc-proxy"), "-zap-log-level=warn"],
    {
      SVC_PROXY_CONFIG: cfg("server", {
        name: "in",
        address: `127.0.0.1:${ports.svcServer}`,
        mode: "server",
        target: { url: `http://127.0.0.1:${upstream.port}` },
        source: { spiffe_ids: [`^${id("client").replace(/\./g, "\\.")}$`] },
      }),
    },
    join(dir, "svc-server.log"),
  );
  const svcClientTo = (listen: number, target: number, log: string) =>
    start(
      [join(ROOT, "dist/svc-proxy"), "-zap-log-level=warn"],
      {
        SVC_PROXY_CONFIG: cfg("client", {
          name: "out",
          address: `127.0.0.1:${listen}`,
          mode: "client",
          target: {
            url: `https://127.0.0.1:${target}`,
            spiffe_ids: [`^${id("server").replace(/\./g, "\\.")}$`],
          },
        }),
      },
      join(dir, log),
    );
  const ghClientTo = (listen: number, target: number, log: string) =>
    start(
      [
        ghostunnel,
        "client",
        `--listen=127.0.0.1:${listen}`,
        `--target=127.0.0.1:${target}`,
        `--use-workload-api-addr=unix://${join(dir, "client.sock")}`,
        `--verify-uri=${id("server")}`,
        "--quiet=all",
      ],
      {},
      join(dir, log),
    );
  const ghServer = start(
    [
      ghostunnel,
      "server",
      `--listen=127.0.0.1:${ports.ghServer}`,
      `--target=127.0.0.1:${upstream.port}`,
      `--use-workload-api-addr=unix://${join(dir, "server.sock")}`,
      `--allow-uri=${id("client")}`,
      "--quiet=all",
    ],
    {},
    join(dir, "gh-server.log"),
  );
  const ghClient = ghClientTo(ports.ghClient as number, ports.ghServer as number, "gh-client.log");
  const svcClient = svcClientTo(ports.svcClient as number, ports.svcServer as number, "svc-client.log");
  // Mixed pairs show which hop limits the svc-proxy pair.
  const ghToSvc = ghClientTo(ports.ghToSvc as number, ports.svcServer as number, "gh-to-svc.log");
  const svcToGh = svcClientTo(ports.svcToGh as number, ports.ghServer as number, "svc-to-gh.log");
  const relay = (mode: string, listen: number, target: number, sa: string) =>
    start([
      process.execPath,
      join(ROOT, "bench/relay-ceiling.ts"),
      mode,
      String(listen),
      String(target),
      join(dir, `${sa}.pem`),
      join(dir, `${sa}.key`),
      join(dir, "ca.pem"),
    ]);
  const relayServer = relay("server", ports.relayServer as number, upstream.port as number, "server");
  const relayClient = relay("client", ports.relayClient as number, ports.relayServer as number, "client");
  for (const p of Object.values(ports)) await waitForPort(p as number);

  const setups: [string, number, Subprocess[]][] = [
    ["direct", upstream.port as number, []],
    ["ghostunnel pair", ports.ghClient as number, [ghClient, ghServer]],
    ["svc-proxy pair", ports.svcClient as number, [svcClient, svcServer]],
    ["ghostunnel client → svc-proxy server", ports.ghToSvc as number, [ghToSvc, svcServer]],
    ["svc-proxy client → ghostunnel server", ports.svcToGh as number, [svcToGh, ghServer]],
    [
      "Bun TLS byte relay pair (ceiling, bench/relay-ceiling.ts)",
      ports.relayClient as number,
      [relayClient, relayServer],
    ],
  ];
  const results = new Map<string, Result>();
  for (const c of CONNECTIONS) {
    for (const [name, port] of setups) {
      await wrk(port, c); // warm-up pass (short runs would otherwise include connection set-up)
      results.set(`${name}/${c}`, await wrk(port, c));
      process.stderr.write(`${name} c=${c}: ${JSON.stringify(results.get(`${name}/${c}`))}\n`);
    }
  }
  const cpu = spawnSync(["nproc"]).stdout.toString().trim();
  const lines = [
    `# HTTP through a proxy pair (bench/http.ts)`,
    "",
    `${new Date().toISOString().slice(0, 10)}, ${cpu} cores, loopback; wrk ${o.seconds}s per cell after a warm-up run; 256-byte responses from a Bun upstream.`,
    "Every hop of every pair and the load generator share the same cores. The relay pair is a ceiling for a relay-based design, not a product: no HTTP parsing, no SPIFFE ID check.",
    "",
    "| connections | setup | requests/s | p50 ms | p99 ms | errors | req/s vs ghostunnel | req/s vs direct | p99 vs ghostunnel |",
    "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
  ];
  for (const c of CONNECTIONS) {
    const direct = results.get(`direct/${c}`) as Result;
    const gh = results.get(`ghostunnel pair/${c}`) as Result;
    for (const [name] of setups) {
      const r = results.get(`${name}/${c}`) as Result;
      const vs = (a: number, b: number) => (name === "direct" ? "" : (a / b).toFixed(2));
      lines.push(
        `| ${c} | ${name} | ${r.rps.toFixed(0)} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${r.errors} | ${name === "ghostunnel pair" ? "1.00" : vs(r.rps, gh.rps)} | ${vs(r.rps, direct.rps)} | ${name === "ghostunnel pair" ? "1.00" : vs(r.p99, gh.p99)} |`,
      );
    }
  }
  lines.push("", "Peak RSS after the run (VmHWM):", "", "| process | MB |", "|---|---:|");
  for (const [name, p] of [
    ["svc-proxy client", svcClient],
    ["svc-proxy server", svcServer],
    ["ghostunnel client", ghClient],
    ["ghostunnel server", ghServer],
  ] as const) {
    lines.push(`| ${name} | ${peakRssMb(p.pid).toFixed(1)} |`);
  }
  const report = `${lines.join("\n")}\n`;
  process.stdout.write(report);
  if (o.out) writeFileSync(o.out, report);
  upstream.stop(true);
} finally {
  for (const p of procs) p.kill("SIGTERM");
  await Promise.all(procs.map((p) => p.exited));
  rmSync(dir, { recursive: true, force: true });
}
