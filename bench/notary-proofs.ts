/**
 * What the notary's proofs cost to serve, in this process over a real SQLite log (no network): a
 * consistency proof from a tree head given out earlier to the log now, against a receipt's inclusion
 * proof. The log holds --leaves records (exchanges, and a receipt every 100), with a tree head given out
 * every 1,000 leaves. The two kinds alternate A B A B over --rounds rounds of --calls calls each; reports
 * the median (range) over the rounds of CPU µs per proof (process.cpuUsage, user + system) and the
 * ratio. Tree heads for the log now are signed once and kept, as the proxy does, so a call signs nothing.
 *
 *   bun bench/notary-proofs.ts [--leaves 100000] [--rounds 5] [--calls 500] [--out bench/results/notary-proofs.md]
 */
import { rmSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { SqliteNotaryStore } from "../proxy/notary-service/records-sqlite.ts";
import { tempDir } from "../tests/support/dev-api.ts";
import {
  exchange,
  notaryIdentity,
  notaryOver,
  ORIGIN,
  receiptFor,
} from "../tests/support/notary-fixtures.ts";
import { median, range, ratio } from "./stats.ts";
import { report } from "./support.ts";

const { values: o } = parseArgs({
  options: {
    leaves: { type: "string", default: "100000" },
    rounds: { type: "string", default: "5" },
    calls: { type: "string", default: "500" },
    out: { type: "string" },
  },
});
const [LEAVES, ROUNDS, CALLS] = [o.leaves, o.rounds, o.calls].map(Number) as [number, number, number];

const dir = tempDir("svc-bench-proofs-");
const id = await notaryIdentity();
const store = SqliteNotaryStore.open(join(dir, "notary.db"));
const notary = notaryOver(store, id);
const receipts: string[] = [];
const given: number[] = [];
try {
  process.stderr.write(`filling a log of ${LEAVES} leaves…\n`);
  for (let n = 0; n < LEAVES; ) {
    if (n % 100 === 0) {
      const { x, receipt } = await receiptFor(id, n);
      await store.logExchange(x, receipt);
      receipts.push(receipt.id);
      n += 2;
    } else {
      await store.logExchange(exchange(n));
      n += 1;
    }
    if (Math.floor(n / 1000) > given.length)
      given.push((await notary.consistency(0, undefined, ORIGIN)).toSize);
  }
  const size = (await store.head()).size;
  const kinds = {
    consistency: (i: number) => notary.consistency(given[i % given.length] as number, undefined, ORIGIN),
    inclusion: (i: number) => notary.proof(receipts[(i * 7919) % receipts.length] as string, ORIGIN),
  };
  const cpu: Record<keyof typeof kinds, number[]> = { consistency: [], inclusion: [] };
  for (const kind of Object.keys(kinds) as (keyof typeof kinds)[])
    for (let i = 0; i < 50; i++) await kinds[kind](i);
  for (let round = 0; round < ROUNDS; round++)
    for (const kind of Object.keys(kinds) as (keyof typeof kinds)[]) {
      const before = process.cpuUsage();
      for (let i = 0; i < CALLS; i++) await kinds[kind](round * CALLS + i);
      const used = process.cpuUsage(before);
      cpu[kind].push((used.user + used.system) / CALLS);
    }
  report(
    [
      "# Serving the notary's proofs (bench/notary-proofs.ts)",
      "",
      `${new Date().toISOString().slice(0, 10)}; one process, SQLite log of ${size} leaves (${receipts.length} receipts), a tree head given out every 1,000 leaves; ${ROUNDS} rounds of ${CALLS} calls per kind, alternating. CPU µs per proof, median of the rounds (range).`,
      "",
      "| proof | CPU µs per proof |",
      "|---|---:|",
      `| consistency, from a tree head given out to the log now | ${median(cpu.consistency).toFixed(0)} (${range(cpu.consistency, 0)}) |`,
      `| inclusion of a receipt | ${median(cpu.inclusion).toFixed(0)} (${range(cpu.inclusion, 0)}) |`,
      "",
      `Consistency ÷ inclusion: ${ratio(median(cpu.consistency), median(cpu.inclusion))}×.`,
      "",
    ],
    o.out,
  );
} finally {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
}
