/**
 * What witnessing costs (docs/notary.md, "Witnesses").
 *
 * 1. A cosign, in this process over real SQLite files (no network): the witness taking one checkpoint
 *    (the checkpoint and tree head verified, the consistency proof checked, what it holds written with
 *    synchronous=FULL, the cosignature signed), alternating A B with the notary signing the checkpoint
 *    it pushes; CPU µs per call, median of --rounds rounds of --calls calls (range).
 * 2. With --chain (needs the test bed, `make testbed-up`): notarized (signRequest) latency of a client
 *    proxy with the notary and no witnesses (A) against one pushing to two witnesses, svc-proxy as
 *    workloads intruder and stale (B), alternating A B over --rounds rounds of --requests sequential
 *    requests: p50 and p99 medians (range), the client proxy's CPU µs per request, and the witnesses' CPU
 *    per request of B.
 *
 *   bun bench/notary-witness.ts [--rounds 5] [--calls 300] [--chain] [--requests 1000] [--out FILE]
 */
import { chownSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { createLogger } from "../proxy/log.ts";
import { SqliteNotaryStore } from "../proxy/notary-service/records-sqlite.ts";
import { WitnessStore } from "../proxy/witness/store.ts";
import { Witness } from "../proxy/witness/witness.ts";
import { tempDir } from "../tests/support/dev-api.ts";
import { freePort, waitForPort } from "../tests/support/net.ts";
import {
  NOTARY,
  notaryIdentity,
  notaryOver,
  ORIGIN,
  receiptFor,
  workloadIdentity,
} from "../tests/support/notary-fixtures.ts";
import { notarizedCall, notaryChain } from "./notary-chain.ts";
import { cpuUs, median, range } from "./stats.ts";
import { report } from "./support.ts";

const { values: o } = parseArgs({
  options: {
    rounds: { type: "string", default: "5" },
    calls: { type: "string", default: "300" },
    chain: { type: "boolean", default: false },
    requests: { type: "string", default: "1000" },
    out: { type: "string" },
  },
});
const [ROUNDS, CALLS, REQUESTS] = [o.rounds, o.calls, o.requests].map(Number) as [number, number, number];
const lines: string[] = ["# Witnessing the notary log (bench/notary-witness.ts)", ""];

/** Part 1: a cosign, and the notary's checkpoint it answers. */
async function cosign(): Promise<void> {
  const dir = tempDir("svc-bench-witness-");
  try {
    const id = await notaryIdentity();
    const wa = await workloadIdentity(id.ca, "spiffe://example.org/ns/edge/sa/witness-a");
    const store = SqliteNotaryStore.open(join(dir, "notary.db"));
    const notary = notaryOver(store, id);
    const witness = new Witness({
      store: WitnessStore.open(join(dir, "witness.db")),
      source: wa.source,
      logs: [NOTARY],
      log: createLogger({ level: "error", encoder: "json" }),
    });
    let held = 0;
    let n = 0;
    /** The log grows by one receipt (two leaves); its checkpoint and the proof from what is held. */
    const next = async () => {
      const { x, receipt } = await receiptFor(id, n++);
      await store.logExchange(x, receipt);
      const c = await notary.checkpoint(ORIGIN);
      const size = Number(c.note.split("\n")[1]);
      const proof =
        held === 0
          ? []
          : (await notary.consistency(held, size, ORIGIN)).path.map(
              (h) => new Uint8Array(Buffer.from(h, "base64url")),
            );
      return { req: { old: held, proof, note: c.note }, treeHead: c.treeHead, size };
    };
    const cpu = { cosign: [] as number[], checkpoint: [] as number[] };
    for (let i = 0; i < 1000; i++) {
      const c = await next();
      await witness.add(c.req, c.treeHead, NOTARY);
      held = c.size;
    }
    for (let round = 0; round < ROUNDS; round++) {
      // A: the witness's part; the checkpoints are made first, outside the measurement.
      const made = [];
      for (let i = 0; i < CALLS; i++) {
        const c = await next();
        made.push(c);
        held = c.size;
      }
      // Each pushed as the pusher would, from the one before it.
      let before = process.cpuUsage();
      let last = made[0]?.req.old as number;
      for (const c of made) {
        const r = await witness.add({ ...c.req, old: last }, c.treeHead, NOTARY);
        if (r.status !== 200) throw new Error(`cosign: ${r.status} ${r.body}`);
        last = c.size;
      }
      let used = process.cpuUsage(before);
      cpu.cosign.push((used.user + used.system) / CALLS);
      // B: the notary signing a checkpoint of its log.
      before = process.cpuUsage();
      for (let i = 0; i < CALLS; i++) await notary.checkpoint(ORIGIN);
      used = process.cpuUsage(before);
      cpu.checkpoint.push((used.user + used.system) / CALLS);
    }
    await store.close();
    lines.push(
      "## A cosign",
      "",
      `${new Date().toISOString().slice(0, 10)}; one process, real SQLite files (the witness's with synchronous=FULL), a log of ${n * 2} leaves by the end; ${ROUNDS} rounds of ${CALLS} calls per kind, alternating; CPU µs per call, median (range).`,
      "",
      "| call | CPU µs |",
      "|---|---:|",
      `| the witness takes a checkpoint: verifies it and its tree head, checks the consistency proof, writes it, cosigns | ${median(cpu.cosign).toFixed(0)} (${range(cpu.cosign, 0)}) |`,
      `| the notary signs the checkpoint it pushes (note and JWS tree head, kept) | ${median(cpu.checkpoint).toFixed(0)} (${range(cpu.checkpoint, 0)}) |`,
      "",
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Part 2: notarized latency without and with pushes to two witnesses. */
async function chain(): Promise<void> {
  const { tb, web, work, proxy, server, client, stop } = notaryChain("bench-notary-witness");
  try {
    const serverPort = await freePort();
    server(serverPort);
    const witnesses = await Promise.all(
      (["intruder", "stale"] as const).map(async (as) => {
        const w = tb.spire.workloads[as];
        if (!w) throw new Error(`test bed workload ${as} missing`);
        const port = await freePort();
        const home = join(work, as);
        mkdirSync(home);
        chownSync(home, w.uid, w.uid);
        const p = proxy(w, {
          witness: { database: join(home, "witness.db"), logs: [{ spiffe_id: web.spiffeId }] },
          listeners: [
            {
              name: "w",
              address: `127.0.0.1:${port}`,
              mode: "server",
              target: { url: "http://127.0.0.1:9" },
              source: { spiffe_ids: [`^${web.spiffeId}$`] },
              middlewares: [{ type: "witness" }],
            },
          ],
        });
        return { spiffeId: w.spiffeId, port, pid: p.pid };
      }),
    );
    const setups = [
      { name: "notary, no witnesses", witnesses: [] as typeof witnesses },
      { name: "notary pushing to two witnesses", witnesses },
    ].map((s, i) => ({
      ...s,
      db: `notary-${i}.db`,
      port: 0,
      pid: 0,
      p50: [] as number[],
      p99: [] as number[],
      cpu: [] as number[],
      wcpu: [] as number[],
    }));
    for (const s of setups) {
      s.port = await freePort();
      s.pid = client(s.port, serverPort, {
        enable: true,
        database: { path: join(work, s.db) },
        witnesses: s.witnesses.map((w) => ({ spiffe_id: w.spiffeId, url: `https://127.0.0.1:${w.port}` })),
      }).pid;
    }
    for (const p of [serverPort, ...witnesses.map((w) => w.port), ...setups.map((s) => s.port)])
      await waitForPort(p, 60_000);
    const call = (port: number) => notarizedCall(port, "signRequest");
    for (const s of setups) for (let i = 0; i < 200; i++) await call(s.port);
    const witnessCpu = () => witnesses.reduce((sum, w) => sum + cpuUs(w.pid), 0);
    for (let round = 0; round < ROUNDS; round++)
      for (const s of setups) {
        const [before, wBefore] = [cpuUs(s.pid), witnessCpu()];
        const ms: number[] = [];
        for (let i = 0; i < REQUESTS; i++) {
          const t = performance.now();
          await call(s.port);
          ms.push(performance.now() - t);
        }
        s.cpu.push((cpuUs(s.pid) - before) / REQUESTS);
        s.wcpu.push((witnessCpu() - wBefore) / REQUESTS);
        ms.sort((a, b) => a - b);
        s.p50.push(ms[Math.floor(0.5 * ms.length)] as number);
        s.p99.push(ms[Math.min(ms.length - 1, Math.floor(0.99 * ms.length))] as number);
      }
    lines.push(
      "## Notarized latency with pushes",
      "",
      `Client proxy (openai, notary at signRequest) → server proxy → Bun upstream on SPIRE identities; ${ROUNDS} rounds alternating, ${REQUESTS} sequential requests each after 200 warm-up requests; pushes every 1 s (the default push_interval) while the log grows; medians (range).`,
      "",
      "| setup | p50 ms | p99 ms | client proxy CPU µs/request | witnesses' CPU µs/request |",
      "|---|---:|---:|---:|---:|",
      ...setups.map(
        (s) =>
          `| ${s.name} | ${median(s.p50).toFixed(3)} (${range(s.p50, 3)}) | ${median(s.p99).toFixed(3)} (${range(s.p99, 3)}) | ${median(s.cpu).toFixed(0)} (${range(s.cpu, 0)}) | ${median(s.wcpu).toFixed(1)} (${range(s.wcpu, 1)}) |`,
      ),
      "",
    );
  } finally {
    await stop();
  }
}

await cosign();
if (o.chain) await chain();
report(lines, o.out);
