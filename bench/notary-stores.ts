/**
 * The notary's store under load: signRequest calls through a notarizing client proxy (openai middleware,
 * SPIRE pod identities) → server proxy → Bun upstream, with the notary on SQLite, on PostgreSQL with one
 * replica, and on PostgreSQL with two replicas (two client proxies, callers taking turns), against the
 * same chain without the notary. Setups alternate A B C D in each round; reported: medians over the
 * rounds (with min–max) of requests/s, p50 and p99 under load, latency added to the chain without the
 * notary, and CPU time per request of the proxies and of PostgreSQL. Needs the test bed
 * (`make testbed-up`) and PostgreSQL installed.
 *
 *   bun bench/notary-stores.ts [--rounds 3] [--requests 1500] [--callers 8] [--out bench/results/notary-stores.md]
 */
import { chownSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { freePort, waitForPort } from "../tests/support/net.ts";
import { startPostgres } from "../tests/support/postgres.ts";
import { notaryChain } from "./notary-chain.ts";

const { values: o } = parseArgs({
  options: {
    rounds: { type: "string", default: "3" },
    requests: { type: "string", default: "1500" },
    callers: { type: "string", default: "8" },
    out: { type: "string" },
  },
});
const ROUNDS = Number(o.rounds);
const N = Number(o.requests);
const CALLERS = Number(o.callers);
const { tb, web, work, server, client: startClient, stop } = notaryChain("bench-notary-stores");
const pg = await startPostgres(join(tb.dir, "bench-postgres"));
await pg.createDatabase("notary");
writeFileSync(join(work, "pg-password"), pg.password, { mode: 0o600 });
chownSync(join(work, "pg-password"), web.uid, web.uid);

/** CPU seconds (user + system) of a process, from /proc. */
function cpuOf(pid: number): number {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return 0;
  }
}
/** CPU seconds of PostgreSQL: the postmaster and its backends (the processes whose parent it is). */
function postgresCpu(): number {
  let total = cpuOf(pg.proc.proc.pid);
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
      if (Number(stat[1]) === pg.proc.proc.pid) total += (Number(stat[11]) + Number(stat[12])) / 100;
    } catch {}
  }
  return total;
}

interface Setup {
  name: string;
  ports: number[];
  pids: number[];
  level?: string;
  postgres: boolean;
}

const serverPort = await freePort();
const client = async (database?: object): Promise<{ port: number; pid: number }> => {
  const port = await freePort();
  const p = startClient(port, serverPort, database ? { enable: true, database } : undefined);
  return { port, pid: p.pid };
};

try {
  const serving = server(serverPort);
  const pgDb = { url: pg.url("notary"), password_file: join(work, "pg-password"), pool_size: 10 };
  const plain = await client();
  const sqlite = await client({ path: join(work, "notary.db") });
  const pg1 = await client(pgDb);
  const pg2 = [await client(pgDb), await client(pgDb)];
  const setups: Setup[] = [
    { name: "without the notary", ports: [plain.port], pids: [plain.pid], postgres: false },
    { name: "SQLite", ports: [sqlite.port], pids: [sqlite.pid], level: "signRequest", postgres: false },
    {
      name: "PostgreSQL, 1 replica",
      ports: [pg1.port],
      pids: [pg1.pid],
      level: "signRequest",
      postgres: true,
    },
    {
      name: "PostgreSQL, 2 replicas",
      ports: pg2.map((c) => c.port),
      pids: pg2.map((c) => c.pid),
      level: "signRequest",
      postgres: true,
    },
  ];
  for (const p of [serverPort, ...setups.flatMap((s) => s.ports)]) await waitForPort(p, 60_000);

  const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: "hello" }] });
  const call = async (port: number, level?: string) => {
    const r = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", ...(level ? { "svc-notarization-level": level } : {}) },
      body,
    });
    await r.arrayBuffer();
    if (r.status !== 200) throw new Error(`status ${r.status}`);
    if (level === "signRequest" && !r.headers.get("svc-receipt-id")) throw new Error("no receipt");
  };
  // Warm-up: connections, JIT, and each notary's first statement.
  for (const s of setups) for (const port of s.ports) for (let i = 0; i < 100; i++) await call(port, s.level);

  const measure = async (s: Setup) => {
    const ms: number[] = [];
    const cpu0 = [...s.pids, serving.pid].map(cpuOf).reduce((a, b) => a + b, 0);
    const db0 = s.postgres ? postgresCpu() : 0;
    let next = 0;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: CALLERS }, async () => {
        for (let i = next++; i < N; i = next++) {
          const t = performance.now();
          await call(s.ports[i % s.ports.length] as number, s.level);
          ms.push(performance.now() - t);
        }
      }),
    );
    const seconds = (performance.now() - t0) / 1000;
    const cpu = [...s.pids, serving.pid].map(cpuOf).reduce((a, b) => a + b, 0) - cpu0;
    const db = s.postgres ? postgresCpu() - db0 : 0;
    ms.sort((a, b) => a - b);
    const q = (p: number) => ms[Math.min(ms.length - 1, Math.floor(p * ms.length))] as number;
    return { rps: N / seconds, p50: q(0.5), p99: q(0.99), cpuUs: (cpu / N) * 1e6, dbUs: (db / N) * 1e6 };
  };
  type M = Awaited<ReturnType<typeof measure>>;
  const results = new Map<string, M[]>(setups.map((s) => [s.name, []]));
  for (let round = 0; round < ROUNDS; round++)
    for (const s of setups) {
      results.get(s.name)?.push(await measure(s));
      process.stderr.write(`round ${round + 1}/${ROUNDS}: ${s.name} done\n`);
    }

  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
  const cell = (ms: M[], k: keyof M, digits: number) => {
    const xs = ms.map((m) => m[k]);
    return `${median(xs).toFixed(digits)} (${Math.min(...xs).toFixed(digits)}–${Math.max(...xs).toFixed(digits)})`;
  };
  const base = results.get("without the notary") as M[];
  const lines = [
    "# The notary's store under load (bench/notary-stores.ts)",
    "",
    `${new Date().toISOString().slice(0, 10)}; client proxy (openai middleware, signRequest) → server proxy → Bun upstream, SPIRE pod identities from the test bed, PostgreSQL (Debian) on loopback; ${CALLERS} concurrent callers, ${N} requests per setup per round, ${ROUNDS} rounds alternating the setups. Medians over the rounds (min–max). CPU: user + system of the proxies in the chain, and of PostgreSQL's processes, per request.`,
    "",
    "| setup | requests/s | p50 ms | p99 ms | added p50 ms | added p99 ms | proxies CPU µs/req | PostgreSQL CPU µs/req |",
    "|---|---:|---:|---:|---:|---:|---:|---:|",
    ...setups.map((s) => {
      const ms = results.get(s.name) as M[];
      const added = (k: "p50" | "p99") =>
        s.level ? (median(ms.map((m) => m[k])) - median(base.map((m) => m[k]))).toFixed(2) : "";
      return `| ${s.name} | ${cell(ms, "rps", 0)} | ${cell(ms, "p50", 2)} | ${cell(ms, "p99", 2)} | ${added("p50")} | ${added("p99")} | ${cell(ms, "cpuUs", 0)} | ${s.postgres ? cell(ms, "dbUs", 0) : ""} |`;
    }),
  ];
  const report = `${lines.join("\n")}\n`;
  process.stdout.write(report);
  if (o.out) await Bun.write(o.out, report);
} finally {
  await stop();
  await pg.stop();
  rmSync(join(tb.dir, "bench-postgres"), { recursive: true, force: true });
}
