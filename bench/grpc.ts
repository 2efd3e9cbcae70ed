/**
 * gRPC calls through a client→server proxy pair: svc-proxy (listeners with connection.http2) against
 * ghostunnel (which relays the bytes of HTTP/2 with prior knowledge), against a pair of Bun TLS byte
 * relays (bench/relay-ceiling.ts: what Bun's own sockets cost with no HTTP/2 read at all) and against a
 * direct connection, in the same run with SVIDs from the same development CA. h2load (Debian's
 * nghttp2-client) sends unary calls of a 64-byte message with 16 streams on 1 connection, then 16
 * connections of 1 stream each, then server-streaming calls (16 messages of 64 KiB each) with 4 streams
 * on 1 connection, the setups alternating over --rounds rounds. Reported: medians (with the range) of
 * calls/s, p50 and p99 latency (from h2load's per-request log), CPU µs per call of each hop, MB per CPU
 * second of each hop for the streams, and the ratios against the ghostunnel pair. The target is
 * bench/grpc-upstream.ts. Needs `make build`, h2load and ghostunnel (`tests/e2e/build-peers.sh
 * ghostunnel`).
 *
 *   bun bench/grpc.ts [--seconds 4] [--rounds 3] [--baseline path/to/svc-proxy] [--out bench/results/grpc.md]
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import type { Subprocess } from "bun";
import { freePort, waitForPort } from "../tests/support/net.ts";
import { h2loadGrpc, STREAM, UNARY, unaryRequest } from "./grpc-load.ts";
import { STREAM_MESSAGES } from "./grpc-upstream.ts";
import { cpuUs, median, quantile, range } from "./stats.ts";
import { BenchRun, exactId, ROOT } from "./support.ts";

const { values: o } = parseArgs({
  options: {
    seconds: { type: "string", default: "4" },
    rounds: { type: "string", default: "3" },
    baseline: { type: "string" },
    out: { type: "string" },
  },
});

interface Result {
  rps: number;
  p50: number;
  p99: number;
  failed: number;
  cpu: number[];
}

const run = new BenchRun();
const dir = run.dir;
const request = unaryRequest(dir);
/** What one server-streaming call carries from the target: its messages with their 5-byte prefixes. */
const STREAM_BYTES = STREAM_MESSAGES * (64 * 1024 + 5);
const LOADS = [
  { name: "16 streams on 1 connection", args: ["-c", "1", "-m", "16"], path: UNARY },
  { name: "16 connections", args: ["-c", "16", "-m", "1", "-t", "2"], path: UNARY },
  { name: "server streaming, 4 streams on 1 connection", args: ["-c", "1", "-m", "4"], path: STREAM },
];

async function h2load(port: number, args: string[], path: string, procs: Subprocess[]): Promise<Result> {
  const log = join(dir, `h2load-${port}.log`);
  const before = procs.map((p) => cpuUs(p.pid));
  const { out, succeeded: done } = await h2loadGrpc({ port, path, args, seconds: o.seconds, request, log });
  const failed = Number(/(\d+) failed/.exec(out)?.[1] ?? 0) + Number(/(\d+) errored/.exec(out)?.[1] ?? 0);
  // Each line: start time (µs since the epoch), status, duration (µs).
  const durations = readFileSync(log, "utf8")
    .trim()
    .split("\n")
    .map((l) => Number(l.split("\t")[2]) / 1000)
    .filter((x) => Number.isFinite(x));
  return {
    rps: Number(/finished in [\d.]+\w+, ([\d.]+) req\/s/.exec(out)?.[1] ?? 0),
    p50: quantile(durations, 0.5),
    p99: quantile(durations, 0.99),
    failed,
    cpu: procs.map((q, i) => (cpuUs(q.pid) - (before[i] as number)) / Math.max(done, 1)),
  };
}

try {
  await run.workloadApis(["client", "server"]);
  const upstreamPort = await freePort();
  run.start([process.execPath, join(ROOT, "bench/grpc-upstream.ts"), String(upstreamPort)]);
  await waitForPort(upstreamPort);

  const svcPair = async (binary?: string) => {
    const [server, client] = [await freePort(), await freePort()];
    const proxy = (sa: string, listener: object) =>
      run.svcProxy(sa, { name: "grpc", connection: { http2: true }, ...listener }, undefined, binary);
    const s = proxy("server", {
      address: `127.0.0.1:${server}`,
      mode: "server",
      target: { url: `http://127.0.0.1:${upstreamPort}` },
      source: { spiffe_ids: [exactId("client")] },
    });
    const c = proxy("client", {
      address: `127.0.0.1:${client}`,
      mode: "client",
      target: { url: `https://127.0.0.1:${server}`, spiffe_ids: [exactId("server")] },
    });
    for (const p of [server, client]) await waitForPort(p);
    return { port: client, procs: [c, s] };
  };
  const setups: Record<string, { port: number; procs: Subprocess[] }> = {
    direct: { port: upstreamPort, procs: [] },
    "ghostunnel pair": await run.ghostunnelPair(upstreamPort),
    "Bun TLS byte relay pair": await run.byteRelayPair(upstreamPort),
    "svc-proxy pair": await svcPair(),
    ...(o.baseline ? { "svc-proxy pair, baseline": await svcPair(o.baseline) } : {}),
  };

  const lines = [
    `# gRPC unary calls through proxy pairs (bench/grpc.ts, ${new Date().toISOString().slice(0, 10)})`,
    "",
    `h2load, ${o.seconds} s per cell, 64-byte messages; medians of ${o.rounds} alternating rounds after a warm-up, range in brackets; CPU is user + system µs per call of each hop (client, server). Loopback, 2 cores shared by every process.`,
    "",
    `Server streaming: each call carries ${STREAM_MESSAGES} messages of 64 KiB from the target; MB/CPU s is MB carried per CPU second of each hop.`,
    "",
    "| load | setup | calls/s | p50 ms | p99 ms | failed | CPU µs/call | MB/CPU s | calls/s vs ghostunnel | p99 vs ghostunnel |",
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
  ];
  for (const load of LOADS) {
    const results: Record<string, Result[]> = {};
    for (const [name, s] of Object.entries(setups)) {
      await h2load(s.port, load.args, load.path, s.procs); // warm-up
      results[name] = [];
    }
    for (let r = 0; r < Number(o.rounds); r++)
      for (const [name, s] of Object.entries(setups)) {
        const x = await h2load(s.port, load.args, load.path, s.procs);
        results[name]?.push(x);
        process.stderr.write(`round ${r + 1} ${load.name} ${name}: ${JSON.stringify(x)}\n`);
      }
    const med = (name: string, f: (x: Result) => number) => median((results[name] ?? []).map(f));
    const gh = "ghostunnel pair";
    for (const name of Object.keys(setups)) {
      const xs = results[name] ?? [];
      const cpus = xs[0]?.cpu.map((_, i) => median(xs.map((x) => x.cpu[i] as number))) ?? [];
      const cpu = cpus.map((c) => c.toFixed(0)).join(", ");
      const perCpu =
        load.path === STREAM && cpus.length
          ? cpus.map((c) => (STREAM_BYTES / 1e6 / (c / 1e6)).toFixed(0)).join(", ")
          : "—";
      lines.push(
        `| ${load.name} | ${name} | ${med(name, (x) => x.rps).toFixed(0)} (${range(
          xs.map((x) => x.rps),
          0,
        )}) | ${med(name, (x) => x.p50).toFixed(2)} | ${med(name, (x) => x.p99).toFixed(2)} | ${xs.reduce((n, x) => n + x.failed, 0)} | ${cpu || "—"} | ${perCpu} | ${(med(name, (x) => x.rps) / med(gh, (x) => x.rps)).toFixed(2)} | ${(med(name, (x) => x.p99) / med(gh, (x) => x.p99)).toFixed(2)} |`,
      );
    }
  }
  const report = `${lines.join("\n")}\n`;
  process.stdout.write(report);
  if (o.out) writeFileSync(o.out, report);
} finally {
  await run.stop();
}
