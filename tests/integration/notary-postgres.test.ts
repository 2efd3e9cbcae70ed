import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { bodyDigest } from "../../lib/notary-objects/ids.ts";
import {
  type InclusionProof,
  verifyConsistencyProof,
  verifyReceiptInclusion,
} from "../../lib/notary-objects/log.ts";
import { createLogger } from "../../proxy/log.ts";
import { checkLog } from "../../proxy/notary-service/log-check.ts";
import type { Notary } from "../../proxy/notary-service/notary.ts";
import { PostgresNotaryStore } from "../../proxy/notary-service/records-postgres.ts";
import { WitnessPusher } from "../../proxy/notary-service/witness-push.ts";
import { WitnessStore } from "../../proxy/witness/store.ts";
import { Witness } from "../../proxy/witness/witness.ts";
import { tempDir } from "../support/dev-api.ts";
import { svcErrorOf } from "../support/errors.ts";
import {
  checkCosignatures,
  NOTARY,
  type NotaryIdentity,
  notaryIdentity,
  notaryOver,
  ORIGIN,
  receiptFor,
  workloadIdentity,
} from "../support/notary-fixtures.ts";
import { type Postgres, startPostgres } from "../support/postgres.ts";
import { BUN, spawnProc, stopAll } from "../support/proc.ts";
import { serverListener } from "../support/server-listener.ts";

/**
 * The notary store on a real PostgreSQL server: replicas (separate pools, and separate processes)
 * migrating at once, appending at once into one log, each serving what the other wrote; the database
 * taken away and given back.
 */
const dir = tempDir("svc-notary-pg-");
let pg: Postgres;
let id: NotaryIdentity;

beforeAll(async () => {
  pg = await startPostgres(dir);
  id = await notaryIdentity();
}, 60_000);
afterAll(async () => {
  await stopAll();
  rmSync(dir, { recursive: true, force: true });
});

const open = (db: string) =>
  PostgresNotaryStore.open({ url: pg.url(db), password: pg.password, poolSize: 4 });

describe("the notary on PostgreSQL", () => {
  test("six processes starting at once migrate the schema once", async () => {
    await pg.createDatabase("startup");
    const script = `
      import { PostgresNotaryStore } from "${process.cwd()}/proxy/notary-service/records-postgres.ts";
      const s = await PostgresNotaryStore.open({ url: process.argv[2], password: process.env.PW, poolSize: 1 });
      console.log("open", (await s.head()).size);
      await s.close();`;
    const file = `${dir}/open.ts`;
    await Bun.write(file, script);
    const procs = Array.from({ length: 6 }, () =>
      spawnProc([BUN, file, pg.url("startup")], { PW: pg.password }),
    );
    const lines = await Promise.all(procs.map((p) => p.waitFor((l) => l.startsWith("open"), 30_000)));
    expect(lines).toEqual(Array(6).fill("open 0"));
    const store = await open("startup");
    expect((await checkLog(store, id.source)).problems).toEqual([]);
    await store.close();
  }, 60_000);

  test("two replicas appending at once make one consistent log, and each proves the other's receipts", async () => {
    await pg.createDatabase("replicas");
    const [a, b] = await Promise.all([open("replicas"), open("replicas")]);
    const written = await Promise.all(
      Array.from({ length: 60 }, async (_, n) => {
        const { x, receipt } = await receiptFor(id, n);
        await (n % 2 === 0 ? a : b).logExchange(x, receipt);
        return receipt;
      }),
    );
    await Promise.all([
      a.putStatement("S".repeat(43), "h.p.s", NOTARY, "C".repeat(43)),
      b.putStatement("S".repeat(43), "h.p.s", NOTARY, "C".repeat(43)),
    ]);
    expect((await a.head()).size).toBe(121);
    expect((await b.head()).root).toEqual((await a.head()).root);
    const [na, nb] = [notaryOver(a, id), notaryOver(b, id)];
    for (const [i, r] of written.entries()) {
      const other = i % 2 === 0 ? nb : na;
      expect((await (i % 2 === 0 ? b : a).receipt(r.id))?.exchange.requestHeaders["x-n"]).toBe(String(i));
      const proof = (await other.proof(r.id, ORIGIN)) as InclusionProof;
      expect((await verifyReceiptInclusion(r.jws, proof, id.bundles)).claims.size).toBeGreaterThanOrEqual(
        121,
      );
    }
    expect((await checkLog(a, id.source)).problems).toEqual([]);
    // From the tree head of 121 leaves the proofs gave out, to the log one record later: a consistency
    // proof from either replica, over the one log.
    await b.putStatement("T".repeat(43), "h.p.s", NOTARY, "C".repeat(43));
    for (const n of [na, nb]) {
      const c = await n.consistency(121, undefined, ORIGIN);
      expect((await verifyConsistencyProof(c, id.bundles)).to.claims.size).toBe(122);
    }
    await Promise.all([a.close(), b.close()]);
  }, 60_000);

  test("cosignatures: the newest cosigned head over a receipt, with its cosignatures; a witness's newest 64 kept", async () => {
    await pg.createDatabase("cosignatures");
    const store = await open("cosignatures");
    await checkCosignatures(store);
    await store.close();
  }, 60_000);

  test("two replicas pushing one log to a witness at once: the witness holds the one log, refuses nothing, and both replicas keep cosignatures", async () => {
    await pg.createDatabase("pushing");
    const [a, b] = await Promise.all([open("pushing"), open("pushing")]);
    const wa = await workloadIdentity(id.ca, "spiffe://example.org/ns/edge/sa/witness-a");
    const results: string[] = [];
    const witness = new Witness({
      store: WitnessStore.open(join(dir, "pushing.witness.db")),
      source: wa.source,
      logs: [NOTARY],
      log: createLogger({ level: "error", encoder: "json" }),
      count: (_l, r) => void results.push(r),
    });
    const listener = await serverListener([{ type: "witness" }], {
      source: wa.source,
      log: createLogger({ level: "error", encoder: "json" }),
      witness,
    });
    // While `race` is set, replica b's next checkpoint is overtaken: once it is signed, replica a
    // appends a record and pushes the larger log before b's push goes out.
    let race = false;
    const overtaken = (notary: Notary) =>
      new Proxy(notary, {
        get(target, name, receiver) {
          const v = Reflect.get(target, name, receiver);
          if (typeof v !== "function") return v;
          if (name !== "checkpoint") return v.bind(target);
          return async (...args: unknown[]) => {
            const c = await v.apply(target, args);
            if (race) {
              race = false;
              const { x, receipt } = await receiptFor(id, 100);
              await a.logExchange(x, receipt);
              await pushers[0]?.flush();
            }
            return c;
          };
        },
      });
    const pushers: WitnessPusher[] = [a, b].map((store) => {
      const notary = store === b ? overtaken(notaryOver(store, id)) : notaryOver(store, id);
      return new WitnessPusher({
        notary,
        witnesses: [{ spiffeId: wa.svid.id.uri, url: listener.url }],
        source: id.source,
        log: createLogger({ level: "error", encoder: "json" }),
        intervalMs: 10_000,
      });
    });
    try {
      for (let round = 0; round < 8; round++) {
        await Promise.all(
          [a, b].map(async (store, r) => {
            const { x, receipt } = await receiptFor(id, round * 2 + r);
            await store.logExchange(x, receipt);
          }),
        );
        await Promise.all(pushers.map((p) => p.flush()));
      }
      // Replica b's checkpoint overtaken by a's larger one: told the size held, b signs the log as it
      // is now and pushes that, never its smaller checkpoint (which the witness would take for a cut).
      const { x, receipt } = await receiptFor(id, 99);
      await b.logExchange(x, receipt);
      race = true;
      await pushers[1]?.flush();
      expect(race).toBe(false);
      // Each replica once more: both end at the log's size.
      for (const p of pushers) await p.flush();
      expect(results.filter((r) => !["cosigned", "stale"].includes(r))).toEqual([]);
      expect(results).toContain("stale");
      const size = (await a.head()).size;
      expect(size).toBe(36);
      for (const store of [a, b]) expect((await store.cosignedHead(0, { count: 1 }))?.head.size).toBe(size);
    } finally {
      for (const p of pushers) p.close();
      await listener.close();
      await Promise.all([a.close(), b.close()]);
    }
  }, 60_000);

  test("a receipt edited in the database is reported by the consistency check", async () => {
    await pg.createDatabase("tampered");
    const store = await open("tampered");
    const { x, receipt } = await receiptFor(id, 1);
    await store.logExchange(x, receipt);
    const { SQL } = await import("bun");
    const sql = new SQL({ url: pg.url("tampered"), password: pg.password, max: 1 });
    await sql`UPDATE receipts SET jws = ${`${receipt.jws}x`} WHERE id = ${receipt.id}`;
    await sql`UPDATE exchanges SET path = '/other' WHERE request_id = 'req-1'`;
    await sql.close();
    const problems = (await checkLog(store, id.source)).problems;
    expect(problems).toEqual([
      expect.stringMatching(/^leaf 0 \(exchange \d+\): the record does not hash to its leaf/),
      expect.stringMatching(
        new RegExp(`^leaf 1 \\(receipt ${receipt.id}\\): the record does not hash to its leaf`),
      ),
    ]);
    await store.close();
  });

  test("with the database gone, writes fail as unavailable after retries; when it is back they succeed", async () => {
    await pg.createDatabase("outage");
    const store = await open("outage");
    const notary = notaryOver(store, id);
    const first = await receiptFor(id, 10);
    await store.logExchange(first.x, first.receipt);
    await pg.stop();
    try {
      const e = await svcErrorOf(
        notary.record(
          "logRequest",
          "S".repeat(43),
          ORIGIN,
          "req-x",
          {
            request: { method: "GET", path: "/", headers: {}, body: bodyDigest("") },
            response: { status: 200, headers: {}, body: bodyDigest("") },
          },
          { request: new Uint8Array(), response: new Uint8Array() },
        ),
      );
      expect(e.code).toBe("notary_unavailable");
      expect(e.message).toContain(`PostgreSQL at postgres://svc@127.0.0.1:${pg.port}/outage is unreachable`);
      expect(e.message).not.toContain(pg.password);
    } finally {
      await pg.start();
    }
    const second = await receiptFor(id, 11);
    await store.logExchange(second.x, second.receipt);
    expect((await store.head()).size).toBe(4);
    expect((await checkLog(store, id.source)).problems).toEqual([]);
    await store.close();
  }, 60_000);

  test("a password in the URL is not needed; a wrong one is a clear start-up error naming no secret", async () => {
    const e = await svcErrorOf(
      PostgresNotaryStore.open({ url: pg.url(), password: "wrong-secret", poolSize: 1 }),
    );
    expect(e.code).toBe("usage");
    expect(e.message).toStartWith(`notary.database.url: postgres://svc@127.0.0.1:${pg.port}/postgres: `);
    expect(e.message).not.toContain("wrong-secret");
  });

  test("a store opened while the server is down answers unavailable, then works once the server is up", async () => {
    await pg.createDatabase("late");
    await pg.stop();
    let store: PostgresNotaryStore;
    try {
      store = await open("late");
      expect(store.unavailable()).toBeDefined();
      const e = await svcErrorOf(store.head());
      expect(e.code).toBe("notary_unavailable");
      expect(e.message).toContain(
        `PostgreSQL at postgres://svc@127.0.0.1:${pg.port}/late has not been reachable since the proxy started`,
      );
    } finally {
      await pg.start();
    }
    await store.connected;
    expect(store.unavailable()).toBeUndefined();
    const { x, receipt } = await receiptFor(id, 1);
    await store.logExchange(x, receipt);
    expect((await store.head()).size).toBe(2);
    await store.close();
  }, 60_000);
});
