/**
 * HTTP through a client→server proxy pair: svc-proxy against ghostunnel (an independent SPIFFE-aware TLS
 * relay) and against a direct connection, in the same run, with the same upstream and SVIDs from the same
 * development Workload API. wrk drives 1, 16 and 64 connections, the setups alternating over --rounds
 * rounds; reports medians (with the range) of requests/s and p50/p99 latency, CPU µs per request of each
 * hop, the proxies' idle, after-load and peak RSS, and the ratios. Needs `make build`, wrk, and ghostunnel only
 * (`tests/e2e/build-peers.sh ghostunnel`); `--syscalls` also needs strace.
 *
 *   bun bench/http.ts [--seconds 5] [--rounds 3] [--connections 1,16,64] [--body 256] [--post 0]
 *                     [--setups direct,ghostunnel,svc,mixed,ceiling] [--baseline path/to/svc-proxy]
 *                     [--syscalls] [--out bench/results/http.md]
 *
 * --body is the response body's size, --post the size of a request body (POST; 0: GET). --baseline adds
 * a pair of another svc-proxy binary (an earlier build), so that before and after alternate in one run.
 * --syscalls counts, after the rounds, the write and read system calls per request of each hop (strace
 * on one more run per pair at the first connection count above 1).
 */

import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { type Subprocess, spawn, spawnSync } from "bun";
import { freePort, waitForPort } from "../tests/support/net.ts";
import { cpuUs, median, range } from "./stats.ts";
import { BenchRun, exactId } from "./support.ts";

const { values: o } = parseArgs({
  options: {
    seconds: { type: "string", default: "5" },
    rounds: { type: "string", default: "3" },
    connections: { type: "string", default: "1,16,64" },
    body: { type: "string", default: "256" },
    post: { type: "string", default: "0" },
    setups: { type: "string", default: "direct,ghostunnel,svc,mixed,ceiling" },
    baseline: { type: "string" },
    syscalls: { type: "boolean", default: false },
    out: { type: "string" },
  },
});
const CONNECTIONS = o.connections.split(",").map(Number);
const SETUPS = new Set(o.setups.split(","));
const BODY = Number(o.body);
const POST = Number(o.post);

/**
 * Resident set size in MB of a process: now (VmRSS), its peak (VmHWM), or its anonymous part (RssAnon: the
 * memory the process itself allocated, without the pages of its executable and libraries).
 */
function rssMb(pid: number, field: "VmRSS" | "VmHWM" | "RssAnon"): number {
  const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) / 1024 : Number.NaN;
}

interface Result {
  rps: number;
  requests: number;
  p50: number;
  p99: number;
  errors: number;
  /** µs of CPU per request, for each process of the setup. */
  cpu: number[];
}

// Asynchronous: the upstream runs in this process and must keep answering while wrk runs.
async function wrk(port: number, connections: number, procs: Subprocess[] = []): Promise<Result> {
  const before = procs.map((p) => cpuUs(p.pid));
  const args = [
    "-t",
    connections > 1 ? "2" : "1",
    "-c",
    String(connections),
    "-d",
    `${o.seconds}s`,
    "--latency",
  ];
  if (POST > 0) args.push("-s", join(dir, "post.lua"));
  const p = spawn(["wrk", ...args, `http://127.0.0.1:${port}/`], { stdout: "pipe" });
  const out = await new Response(p.stdout).text();
  await p.exited;
  const requests = Number(/(\d+) requests in/.exec(out)?.[1] ?? Number.NaN);
  const cpu = procs.map((q, i) => (cpuUs(q.pid) - (before[i] as number)) / requests);
  const ms = (label: string) => {
    const m = new RegExp(`^\\s*${label}\\s+([\\d.]+)(us|ms|s)$`, "m").exec(out);
    if (!m) return Number.NaN;
    return Number(m[1]) * ({ us: 0.001, ms: 1, s: 1000 }[m[2] as "us" | "ms" | "s"] ?? 1);
  };
  const errors = /Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1];
  const socketErrors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  return {
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1]),
    requests,
    cpu,
    p50: ms("50%"),
    p99: ms("99%"),
    errors:
      Number(errors ?? 0) + (socketErrors ? socketErrors.slice(1).reduce((a, b) => a + Number(b), 0) : 0),
  };
}

/** Writes and reads per request of each process of each setup with processes, under strace. */
async function countSyscalls(
  setups: [string, number, Subprocess[]][],
  connections: number,
): Promise<string[]> {
  const rows: string[] = [];
  for (const [name, port, procs] of setups) {
    if (procs.length === 0) continue;
    const traces = procs.map((p, i) => {
      const file = join(dir, `strace-${p.pid}-${i}.txt`);
      return {
        file,
        proc: spawn(["strace", "-c", "-f", "-o", file, "-p", String(p.pid)], { stderr: "pipe" }),
      };
    });
    // strace says "Process N attached" once it is in place.
    await Promise.all(
      traces.map(async ({ proc }) => {
        const reader = (proc.stderr as ReadableStream<Uint8Array>).getReader();
        let seen = "";
        while (!seen.includes("attached")) {
          const { value, done } = await reader.read();
          if (done) break;
          seen += new TextDecoder().decode(value);
        }
        reader.releaseLock();
      }),
    );
    const x = await wrk(port, connections);
    for (const { proc } of traces) proc.kill("SIGINT");
    await Promise.all(traces.map(({ proc }) => proc.exited));
    const per = (file: string, calls: string[]) => {
      let n = 0;
      for (const line of readFileSync(file, "utf8").split("\n")) {
        const f = line.trim().split(/\s+/);
        if (calls.includes(f[f.length - 1] as string)) n += Number(f[3]);
      }
      return (n / x.requests).toFixed(2);
    };
    const writes = traces.map((t) => per(t.file, ["write", "writev", "sendto", "sendmsg"])).join(", ");
    const reads = traces.map((t) => per(t.file, ["read", "readv", "recvfrom", "recvmsg"])).join(", ");
    rows.push(`| ${name} | ${writes} | ${reads} |`);
  }
  return rows;
}

const run = new BenchRun();
const dir = run.dir;
try {
  await run.workloadApis(["client", "server"]);
  await run.byteRelayCerts();
  const body = "x".repeat(BODY);
  // The upstream reads a request's body whole before it answers, as most servers do.
  const upstream = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    maxRequestBodySize: Math.max(POST, 1024) * 2,
    fetch: async (req) => {
      if (req.body) await req.arrayBuffer();
      return new Response(body);
    },
  });
  if (POST > 0)
    writeFileSync(
      join(dir, "post.lua"),
      `wrk.method = "POST"\nwrk.body = string.rep("x", ${POST})\nwrk.headers["Content-Type"] = "application/octet-stream"\n`,
    );
  const ports = Object.fromEntries(
    await Promise.all(
      [
        "svcServer",
        "svcClient",
        "baseServer",
        "baseClient",
        "ghServer",
        "ghClient",
        "relayServer",
        "relayClient",
        "ghToSvc",
        "svcToGh",
      ].map(async (k) => [k, await freePort()]),
    ),
  );

  const svcServerAt = (listen: number, log: string, binary?: string) =>
    run.svcProxy(
      "server",
      {
        name: "in",
        address: `127.0.0.1:${listen}`,
        mode: "server",
        target: { url: `http://127.0.0.1:${upstream.port}` },
        source: { spiffe_ids: [exactId("client")] },
      },
      log,
      binary,
    );
  const svcServer = svcServerAt(ports.svcServer as number, "svc-server.log");
  const svcClientTo = (listen: number, target: number, log: string, binary?: string) =>
    run.svcProxy(
      "client",
      {
        name: "out",
        address: `127.0.0.1:${listen}`,
        mode: "client",
        target: { url: `https://127.0.0.1:${target}`, spiffe_ids: [exactId("server")] },
      },
      log,
      binary,
    );
  const baseServer = o.baseline
    ? svcServerAt(ports.baseServer as number, "base-server.log", o.baseline)
    : undefined;
  const baseClient = o.baseline
    ? svcClientTo(ports.baseClient as number, ports.baseServer as number, "base-client.log", o.baseline)
    : undefined;
  const ghClientTo = (listen: number, target: number, log: string) =>
    run.ghostunnel("client", "client", "server", listen, target, log);
  const ghServer = run.ghostunnel(
    "server",
    "server",
    "client",
    ports.ghServer as number,
    upstream.port as number,
    "gh-server.log",
  );
  const ghClient = ghClientTo(ports.ghClient as number, ports.ghServer as number, "gh-client.log");
  const svcClient = svcClientTo(ports.svcClient as number, ports.svcServer as number, "svc-client.log");
  // Mixed pairs show which hop limits the svc-proxy pair.
  const ghToSvc = ghClientTo(ports.ghToSvc as number, ports.svcServer as number, "gh-to-svc.log");
  const svcToGh = svcClientTo(ports.svcToGh as number, ports.ghServer as number, "svc-to-gh.log");
  const relayServer = run.byteRelay("server", ports.relayServer as number, upstream.port as number, "server");
  const relayClient = run.byteRelay(
    "client",
    ports.relayClient as number,
    ports.relayServer as number,
    "client",
  );
  for (const [k, p] of Object.entries(ports))
    if (o.baseline || !k.startsWith("base")) await waitForPort(p as number);
  const proxies: [string, Subprocess][] = [
    ["svc-proxy client", svcClient],
    ["svc-proxy server", svcServer],
    ...(baseClient && baseServer
      ? ([
          ["svc-proxy client, baseline", baseClient],
          ["svc-proxy server, baseline", baseServer],
        ] as [string, Subprocess][])
      : []),
    ["ghostunnel client", ghClient],
    ["ghostunnel server", ghServer],
  ];
  const idleRss = new Map(proxies.map(([name, p]) => [name, rssMb(p.pid, "VmRSS")]));
  const idleAnon = new Map(proxies.map(([name, p]) => [name, rssMb(p.pid, "RssAnon")]));

  const all: [string, string, number, Subprocess[]][] = [
    ["direct", "direct", upstream.port as number, []],
    ["ghostunnel", "ghostunnel pair", ports.ghClient as number, [ghClient, ghServer]],
    ["svc", "svc-proxy pair", ports.svcClient as number, [svcClient, svcServer]],
    ...(baseClient && baseServer
      ? [
          [
            "baseline",
            `svc-proxy pair, baseline (${o.baseline})`,
            ports.baseClient as number,
            [baseClient, baseServer],
          ] as [string, string, number, Subprocess[]],
        ]
      : []),
    ["mixed", "ghostunnel client → svc-proxy server", ports.ghToSvc as number, [ghToSvc, svcServer]],
    ["mixed", "svc-proxy client → ghostunnel server", ports.svcToGh as number, [svcToGh, ghServer]],
    [
      "ceiling",
      "Bun TLS byte relay pair (ceiling, bench/relay-ceiling.ts)",
      ports.relayClient as number,
      [relayClient, relayServer],
    ],
  ];
  const setups = all
    .filter(([key]) => SETUPS.has(key) || key === "baseline")
    .map(([, name, port, procs]) => [name, port, procs] as [string, number, Subprocess[]]);
  // Per connection count: a warm-up pass of every setup, then --rounds rounds of every setup in turn.
  const rounds = Number(o.rounds);
  const results = new Map<string, Result[]>();
  const afterRss = new Map<string, number>();
  for (const c of CONNECTIONS) {
    for (const [, port] of setups) await wrk(port, c);
    for (let r = 0; r < rounds; r++)
      for (const [name, port, procs] of setups) {
        const x = await wrk(port, c, procs);
        results.set(`${name}/${c}`, [...(results.get(`${name}/${c}`) ?? []), x]);
        process.stderr.write(`round ${r + 1} ${name} c=${c}: ${JSON.stringify(x)}\n`);
      }
    if (c === CONNECTIONS[CONNECTIONS.length - 1])
      for (const [name, p] of proxies) afterRss.set(name, rssMb(p.pid, "VmRSS"));
  }
  const syscalls = o.syscalls ? await countSyscalls(setups, CONNECTIONS.find((c) => c > 1) ?? 16) : [];
  const cpu = spawnSync(["nproc"]).stdout.toString().trim();
  const lines = [
    `# HTTP through a proxy pair (bench/http.ts)`,
    "",
    `${new Date().toISOString().slice(0, 10)}, ${cpu} cores, loopback; wrk ${o.seconds}s per cell; per connection count a warm-up pass of every setup, then ${rounds} rounds of every setup in turn; medians with the range over rounds; ${POST > 0 ? `POST requests with ${POST}-byte bodies, ` : "GET requests, "}${BODY}-byte responses from a Bun upstream.`,
    "Every hop of every pair and the load generator share the same cores. The relay pair is a ceiling for a relay-based design, not a product: no HTTP parsing, no SPIFFE ID check. CPU is user + system µs per request of each process of the setup (client hop, server hop).",
    "",
    "| connections | setup | requests/s | p50 ms | p99 ms | errors | CPU µs/request (client, server) | req/s vs ghostunnel | req/s vs direct | p99 vs ghostunnel |",
    "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
  ];
  for (const c of CONNECTIONS) {
    const at = (name: string) => results.get(`${name}/${c}`) ?? [];
    const rps = (name: string) => median(at(name).map((x) => x.rps));
    const p99 = (name: string) => median(at(name).map((x) => x.p99));
    for (const [name, , procs] of setups) {
      const xs = at(name);
      // A ratio to a setup this run did not measure (--setups without it) is shown as "–".
      const vs = (a: number, b: number) =>
        name === "direct" || !Number.isFinite(a / b) ? "–" : (a / b).toFixed(2);
      const cpuCells = procs.map((_, i) => median(xs.map((x) => x.cpu[i] as number)).toFixed(0)).join(", ");
      lines.push(
        `| ${c} | ${name} | ${rps(name).toFixed(0)} (${range(
          xs.map((x) => x.rps),
          0,
        )}) | ${median(xs.map((x) => x.p50)).toFixed(2)} | ${p99(name).toFixed(2)} (${range(
          xs.map((x) => x.p99),
          2,
        )}) | ${xs.reduce((n, x) => n + x.errors, 0)} | ${cpuCells} | ${vs(rps(name), rps("ghostunnel pair"))} | ${vs(rps(name), rps("direct"))} | ${vs(p99(name), p99("ghostunnel pair"))} |`,
      );
    }
  }
  lines.push(
    "",
    "Resident memory (VmRSS) when idle after start, its anonymous part (RssAnon; the rest are pages of the",
    "executable, shared by every process of the same binary), after the 64-connection runs, and the peak (VmHWM):",
    "",
    "| process | idle MB | idle anonymous MB | after 64 connections MB | peak MB |",
    "|---|---:|---:|---:|---:|",
  );
  for (const [name, p] of proxies)
    lines.push(
      `| ${name} | ${idleRss.get(name)?.toFixed(1)} | ${idleAnon.get(name)?.toFixed(1)} | ${afterRss.get(name)?.toFixed(1)} | ${rssMb(p.pid, "VmHWM").toFixed(1)} |`,
    );
  if (syscalls.length > 0)
    lines.push(
      "",
      "System calls per request of each hop (strace -c -f on one more run per pair; writes are write, writev,",
      "sendto and sendmsg; a TLS write of up to 16 KiB is one TLS record):",
      "",
      "| setup | writes per request (client, server) | reads per request (client, server) |",
      "|---|---:|---:|",
      ...syscalls,
    );
  const report = `${lines.join("\n")}\n`;
  process.stdout.write(report);
  if (o.out) writeFileSync(o.out, report);
  upstream.stop(true);
} finally {
  await run.stop();
}
