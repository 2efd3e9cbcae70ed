/**
 * Added latency of notarization per level: the same client→server proxy chain (openai middleware, SPIRE
 * pod identities) without the notary and with it at workload, logRequest and signRequest. Sequential
 * requests on one keep-alive connection; p50 and p99 per setup, and the difference to the chain without
 * the notary. Needs the test bed (`make testbed-up`).
 *
 *   bun bench/notary.ts [--requests 2000] [--out bench/results/notary.md]
 *                       [--baseline path/to/svc-proxy [--rounds 5]]
 *
 * --baseline adds a comparison at signRequest of two compiled client proxies with the notary, this
 * build's dist/svc-proxy (run `make build` first) and the baseline, alternating A B A B over the rounds: p50 and p99 medians with
 * their range, and the client proxy's CPU time per request.
 */
import { join } from "node:path";
import { parseArgs } from "node:util";
import { freePort, waitForPort } from "../tests/support/net.ts";
import { notarizedCall, notaryChain } from "./notary-chain.ts";
import { cpuUs, median, range } from "./stats.ts";
import { ROOT } from "./support.ts";

const { values: o } = parseArgs({
  options: {
    requests: { type: "string", default: "2000" },
    out: { type: "string" },
    baseline: { type: "string" },
    rounds: { type: "string", default: "5" },
  },
});
const N = Number(o.requests);
const { work, server, client, stop } = notaryChain("bench-notary");
const [serverPort, plainPort, notaryPort] = [await freePort(), await freePort(), await freePort()];
const measure = async (port: number, level?: string) => {
  const call = () => notarizedCall(port, level);
  for (let i = 0; i < 200; i++) await call(); // warm-up (and the first statement)
  const ms: number[] = [];
  for (let i = 0; i < N; i++) {
    const t = performance.now();
    await call();
    ms.push(performance.now() - t);
  }
  ms.sort((a, b) => a - b);
  const q = (p: number) => ms[Math.min(ms.length - 1, Math.floor(p * ms.length))] as number;
  return { p50: q(0.5), p99: q(0.99) };
};

try {
  server(serverPort);
  client(plainPort, serverPort);
  client(notaryPort, serverPort, { enable: true, database: { path: join(work, "notary.db") } });
  for (const p of [serverPort, plainPort, notaryPort]) await waitForPort(p, 60_000);

  const rows: [string, { p50: number; p99: number }][] = [];
  rows.push(["without the notary", await measure(plainPort)]);
  for (const level of ["workload", "logRequest", "signRequest"])
    rows.push([`notary, ${level}`, await measure(notaryPort, level)]);
  const base = rows[0]?.[1] as { p50: number; p99: number };
  const lines = [
    "# Notarization latency (bench/notary.ts)",
    "",
    `${new Date().toISOString().slice(0, 10)}; client proxy (openai middleware) → server proxy → Bun upstream, SPIRE pod identities from the test bed; ${N} sequential requests on one keep-alive connection per setup after 200 warm-up requests.`,
    "",
    "| setup | p50 ms | p99 ms | added p50 ms | added p99 ms |",
    "|---|---:|---:|---:|---:|",
    ...rows.map(
      ([name, r]) =>
        `| ${name} | ${r.p50.toFixed(3)} | ${r.p99.toFixed(3)} | ${name === "without the notary" ? "" : (r.p50 - base.p50).toFixed(3)} | ${name === "without the notary" ? "" : (r.p99 - base.p99).toFixed(3)} |`,
    ),
  ];
  if (o.baseline) lines.push("", ...(await compare(o.baseline)));
  const report = `${lines.join("\n")}\n`;
  process.stdout.write(report);
  if (o.out) await Bun.write(o.out, report);
} finally {
  await stop();
}

/** This build against `baseline` at signRequest, alternating A B A B (see the top of the file). */
async function compare(baseline: string): Promise<string[]> {
  const setups = [
    { name: "this build (dist/svc-proxy)", command: [join(ROOT, "dist/svc-proxy")], db: "notary-a.db" },
    { name: `baseline (${baseline})`, command: [baseline], db: "notary-b.db" },
  ].map((s) => ({ ...s, port: 0, pid: 0, p50: [] as number[], p99: [] as number[], cpu: [] as number[] }));
  for (const s of setups) {
    s.port = await freePort();
    s.pid = client(s.port, serverPort, { enable: true, database: { path: join(work, s.db) } }, s.command).pid;
    await waitForPort(s.port, 60_000);
  }
  for (let round = 0; round < Number(o.rounds); round++)
    for (const s of setups) {
      const before = cpuUs(s.pid);
      const r = await measure(s.port, "signRequest");
      s.cpu.push((cpuUs(s.pid) - before) / (N + 200));
      s.p50.push(r.p50);
      s.p99.push(r.p99);
    }
  return [
    `This build against the baseline, both compiled, at signRequest: ${o.rounds} rounds alternating, ${N} requests each after 200 warm-up requests; medians (range).`,
    "",
    "| setup | p50 ms | p99 ms | client proxy CPU µs/request |",
    "|---|---:|---:|---:|",
    ...setups.map(
      (s) =>
        `| ${s.name} | ${median(s.p50).toFixed(3)} (${range(s.p50, 3)}) | ${median(s.p99).toFixed(3)} (${range(s.p99, 3)}) | ${median(s.cpu).toFixed(0)} (${range(s.cpu, 0)}) |`,
    ),
  ];
}
