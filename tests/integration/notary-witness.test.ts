import { Database } from "bun:sqlite";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { addCheckpointBody, parseAddCheckpoint } from "../../lib/notary-objects/add-checkpoint.ts";
import { checkpointOrigin, checkpointText, signCheckpoint } from "../../lib/notary-objects/checkpoint.ts";
import { checkWitnessed, signCosignature, verifyCosignature } from "../../lib/notary-objects/cosignature.ts";
import { svidSigner } from "../../lib/notary-objects/jws.ts";
import type { InclusionProof } from "../../lib/notary-objects/log.ts";
import { signTreeHead, verifyTreeHead } from "../../lib/notary-objects/log.ts";
import { consistencyPath } from "../../lib/notary-objects/merkle.ts";
import type { ListenerConfig } from "../../proxy/config/types.ts";
import type { ProxyRequest } from "../../proxy/http/types.ts";
import { createLogger } from "../../proxy/log.ts";
import { registerMiddleware } from "../../proxy/middleware/chain.ts";
import { witness as witnessRoutes } from "../../proxy/middleware/witness.ts";
import { Notary } from "../../proxy/notary-service/notary.ts";
import { SqliteNotaryStore } from "../../proxy/notary-service/records-sqlite.ts";
import { WitnessPusher } from "../../proxy/notary-service/witness-push.ts";
import { startPolling } from "../../proxy/witness/poll.ts";
import { WitnessStore } from "../../proxy/witness/store.ts";
import { Witness, type WitnessResult } from "../../proxy/witness/witness.ts";
import { tempDir } from "../support/dev-api.ts";
import { svcErrorOf } from "../support/errors.ts";
import {
  checkCosignatures,
  NOTARY,
  type NotaryIdentity,
  notaryIdentity,
  notaryOver,
  ORIGIN,
  queryNotary,
  receiptFor,
  workloadIdentity,
} from "../support/notary-fixtures.ts";
import { BUN, ROOT } from "../support/proc.ts";
import { serverListener } from "../support/server-listener.ts";
import { waitUntil } from "../support/wait.ts";

/**
 * The witness (docs/notary.md, "Witnesses") over real notary logs (SQLite) and its own SQLite file: it
 * cosigns a checkpoint only when the log extends the one it holds; a cut log (restored from an old
 * backup) and a forked one (a second database under the notary's SPIFFE ID) are refused, logged, counted
 * and kept as evidence, and the log stays refused across restarts until `svc notary witness` lifts it.
 * The routes (add-checkpoint, checkpoint) and their refusals; the witness policy's count.
 */
const dir = tempDir("svc-notary-witness-");
const WITNESS_A = "spiffe://example.org/ns/edge/sa/witness-a";
const WITNESS_B = "spiffe://example.org/ns/edge/sa/witness-b";
let id: NotaryIdentity;
let wa: NotaryIdentity;
let wb: NotaryIdentity;

beforeAll(async () => {
  id = await notaryIdentity();
  wa = await workloadIdentity(id.ca, WITNESS_A);
  wb = await workloadIdentity(id.ca, WITNESS_B);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A notary log of `n` receipts in `name`.db, from exchange `offset` on. */
async function log(name: string, n: number, offset = 0) {
  const store = SqliteNotaryStore.open(join(dir, `${name}.db`));
  const notary = notaryOver(store, id);
  await grow(store, offset, offset + n);
  return { store, notary };
}

async function grow(store: SqliteNotaryStore, from: number, to: number) {
  for (let i = from; i < to; i++) {
    const { x, receipt } = await receiptFor(id, i);
    await store.logExchange(x, receipt);
  }
}

/** The ID of the newest receipt in `store`'s log. */
async function lastReceipt(store: SqliteNotaryStore): Promise<string | undefined> {
  const leaves = await store.leaves(0, 1_000_000);
  return leaves.filter((l) => l.kind === "receipt").at(-1)?.ref;
}

/** A witness over its own file, its log lines and counts collected. */
function witnessOver(name: string, who = wa) {
  const lines: { level: string; msg: string; [k: string]: unknown }[] = [];
  const counts: [string, WitnessResult][] = [];
  const store = WitnessStore.open(join(dir, `${name}.witness.db`));
  const w = new Witness({
    store,
    source: who.source,
    logs: [NOTARY],
    log: createLogger({ level: "debug", encoder: "json", write: (l) => void lines.push(JSON.parse(l)) }),
    count: (l, r) => void counts.push([l, r]),
  });
  return { w, store, lines, counts };
}

/** A checkpoint of the notary's log (`size` leaves, base64url `root`) signed `seconds` from now. */
async function checkpointAt(size: number, root: string, seconds: number) {
  const hash = new Uint8Array(Buffer.from(root, "base64url"));
  const name = checkpointOrigin(NOTARY);
  const signer = svidSigner(id.svid.keyPem, id.svid.chain);
  return {
    note: signCheckpoint(checkpointText(name, size, hash), name, signer.key),
    treeHead: await signTreeHead(NOTARY, ORIGIN, size, hash, signer, new Date(Date.now() + seconds * 1000)),
  };
}

/** What a witness holds of the notary's log: its size, and why it refuses it. */
const w_held = (store: WitnessStore) => {
  const h = store.held(checkpointOrigin(NOTARY));
  return { size: h?.size, refused: h?.refused };
};

/** The notary's checkpoint now, with the consistency proof from `old` leaves. */
async function push(notary: Notary, old: number) {
  const c = await notary.checkpoint(ORIGIN);
  const size = Number(c.note.split("\n")[1]);
  // As the notary's pusher: the path from the log's own subtrees; none from 0 or to a smaller log.
  const proof =
    old > 0 && old < size ? await consistencyPath((l, i) => notary.store.node(l, i), old, size) : [];
  return { req: { old, proof, note: c.note }, treeHead: c.treeHead, size };
}

const svc = (...args: string[]) => {
  const p = Bun.spawnSync([BUN, "cmd/svc.ts", "notary", "witness", ...args], { cwd: ROOT });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
};

describe("a witness of the notary log", () => {
  test("cosigns the first checkpoint and each larger one that extends it; a stale old size is a 409 naming the size held", async () => {
    const { store, notary } = await log("grows", 3);
    const { w, counts, store: ws } = witnessOver("grows");
    const first = await push(notary, 0);
    const one = await w.add(first.req, first.treeHead, NOTARY);
    expect(one.status).toBe(200);
    // The answer is a signature line under the witness's name, and a cosignature JWS of this head.
    expect(one.body).toStartWith(`— ${checkpointOrigin(WITNESS_A)} `);
    const cs = await verifyCosignature(one.cosignature as string, id.bundles);
    const head = await verifyTreeHead(first.treeHead, id.bundles);
    expect({ by: cs.issuer.uri, log: cs.log, size: cs.claims.size, root: cs.claims.root }).toEqual({
      by: WITNESS_A,
      log: NOTARY,
      size: 6,
      root: head.claims.root,
    });
    await grow(store, 3, 5);
    const second = await push(notary, 6);
    expect((await w.add(second.req, second.treeHead, NOTARY)).status).toBe(200);
    // The same checkpoint again is cosigned again; one sent as if the witness held another size is not.
    expect((await w.add({ ...second.req, old: 10, proof: [] }, second.treeHead, NOTARY)).status).toBe(200);
    const stale = await w.add(first.req, first.treeHead, NOTARY);
    expect({ status: stale.status, body: stale.body, type: stale.contentType }).toEqual({
      status: 409,
      body: "10\n",
      type: "text/x.tlog.size",
    });
    // The same checkpoint with a proof it does not need is cosigned; the larger one held stays.
    const junk = [new Uint8Array(32).fill(1)];
    expect((await w.add({ ...second.req, old: 10, proof: junk }, second.treeHead, NOTARY)).status).toBe(200);
    // An older, smaller checkpoint sent again proves nothing: refused, and the log is not. (Older: the
    // one held is dated two minutes on.)
    await grow(store, 5, 6);
    const third = await push(notary, 10);
    const root12 = (await verifyTreeHead(third.treeHead, id.bundles)).claims.root;
    // Dated ahead of the witness's clock by more than 5 minutes: refused, as it would make every later
    // checkpoint look older than it.
    const ahead = await checkpointAt(12, root12, 600);
    const early = await w.add({ ...third.req, note: ahead.note }, ahead.treeHead, NOTARY);
    expect(early.status).toBe(403);
    expect(early.body).toContain("ahead of this witness's clock");
    const later = await checkpointAt(12, root12, 120);
    expect((await w.add({ ...third.req, note: later.note }, later.treeHead, NOTARY)).status).toBe(200);
    const replayed = await w.add({ ...first.req, old: 12 }, first.treeHead, NOTARY);
    expect({ status: replayed.status, body: replayed.body }).toEqual({
      status: 400,
      body: "the checkpoint of 6 leaves is older than the one of 12 leaves held\n",
    });
    expect(w_held(ws)).toEqual({ size: 12, refused: undefined });
    expect(counts.map((c) => c[1])).toEqual([
      "cosigned",
      "cosigned",
      "cosigned",
      "stale",
      "cosigned",
      "invalid",
      "cosigned",
      "old",
    ]);
    await store.close();
  });

  test("a cut log (restored from an old backup and grown again) is refused, logged, counted and kept as evidence, and stays refused across a restart until svc notary witness acts", async () => {
    (await log("honest", 3)).store.close();
    copyFileSync(join(dir, "honest.db"), join(dir, "backup.db"));
    const honest = await log("honest", 0);
    await grow(honest.store, 3, 6);
    const { w, store: ws, lines, counts } = witnessOver("cut");
    const first = await push(honest.notary, 0);
    expect((await w.add(first.req, first.treeHead, NOTARY)).status).toBe(200);
    // The cut: the log restored from the backup (6 leaves) is all the notary has now.
    const cut = await log("backup", 0);
    const smaller = await push(cut.notary, 12);
    const refused = await w.add(smaller.req, smaller.treeHead, NOTARY);
    expect(refused.status).toBe(400);
    expect(refused.body).toContain("a checkpoint of 6 leaves after one of 12: it lost records");
    const error = lines.find((l) => l.level === "error");
    expect(error?.msg).toBe("witness: checkpoint refused; the log is refused until an operator acts");
    expect(counts.at(-1)).toEqual([NOTARY, "cut"]);
    const [evidence] = ws.evidence();
    expect(evidence).toMatchObject({
      origin: checkpointOrigin(NOTARY),
      heldSize: 12,
      oldSize: 12,
      note: smaller.req.note,
    });
    // Grown again past what the witness held: still not consistent, and the log is refused anyway.
    await grow(cut.store, 100, 110);
    const regrown = await push(cut.notary, 12);
    expect((await w.add(regrown.req, regrown.treeHead, NOTARY)).status).toBe(403);
    // Even the honest log's next checkpoint is refused until an operator decides.
    await grow(honest.store, 6, 7);
    const next = await push(honest.notary, 12);
    const stillRefused = await w.add(next.req, next.treeHead, NOTARY);
    expect(stillRefused.status).toBe(403);
    expect(stillRefused.body).toContain("refuses the log of");
    expect(counts.at(-1)).toEqual([NOTARY, "refused"]);
    expect(ws.evidence()).toHaveLength(1);
    ws.close();
    // A restart remembers the refusal.
    const again = witnessOver("cut");
    expect((await again.w.add(next.req, next.treeHead, NOTARY)).status).toBe(403);
    const listed = svc("--database", join(dir, "cut.witness.db"));
    expect(listed.out).toContain("REFUSED since");
    expect(listed.out).toContain("it lost records");
    // --resume: served again, and still held to the checkpoint of 12 leaves.
    const resumed = svc("--database", join(dir, "cut.witness.db"), "--resume", NOTARY);
    expect(resumed.code).toBe(0);
    expect((await again.w.add(next.req, next.treeHead, NOTARY)).status).toBe(200);
    // The honest log went on (14 leaves held); the cut one, told so, cannot show it extends that.
    const diverged = await again.w.add({ ...regrown.req, old: 14 }, regrown.treeHead, NOTARY);
    expect(diverged.status).toBe(422);
    // --forget: the cut log's next checkpoint is taken as the first; the evidence stays.
    expect(svc("--database", join(dir, "cut.witness.db"), "--forget", checkpointOrigin(NOTARY)).code).toBe(0);
    const fresh = await push(cut.notary, 0);
    expect((await again.w.add(fresh.req, fresh.treeHead, NOTARY)).status).toBe(200);
    expect(again.store.evidence()).toHaveLength(2);
    const json = JSON.parse(svc("--database", join(dir, "cut.witness.db"), "-o", "json").out);
    expect(json.logs[0]).toMatchObject({ size: 26 });
    expect(json.evidence.map((e: { heldSize: number }) => e.heldSize)).toEqual([12, 14]);
    expect(svc("--database", join(dir, "nothing.db")).err).toContain("no such file");
    again.store.close();
    for (const s of [honest.store, cut.store]) await s.close();
    // Files the witness must not take over: another program's database, and one of a newer build.
    const other = new Database(join(dir, "other.db"));
    other.run("CREATE TABLE t (x INTEGER); PRAGMA user_version = 1");
    other.close();
    expect(svc("--database", join(dir, "other.db")).err).toContain("it is not a witness database");
    // One at schema 0, as any SQLite file starts, is refused too, and not written to.
    const zero = new Database(join(dir, "other-zero.db"));
    zero.run("CREATE TABLE t (x INTEGER)");
    zero.close();
    const before = readFileSync(join(dir, "other-zero.db"));
    expect(svc("--database", join(dir, "other-zero.db")).err).toContain("it is not a witness database");
    expect(readFileSync(join(dir, "other-zero.db")).equals(before)).toBe(true);
    copyFileSync(join(dir, "cut.witness.db"), join(dir, "newer.witness.db"));
    const newer = new Database(join(dir, "newer.witness.db"));
    newer.run("PRAGMA user_version = 2");
    newer.close();
    const newerRefused = svc("--database", join(dir, "newer.witness.db"));
    expect(newerRefused.code).not.toBe(0);
    expect(newerRefused.err).toContain("schema version 2, newer than this build's 1; use a newer svc-proxy");
  });

  test("a forked log (a second database under the notary's SPIFFE ID) is refused: the same size with another root, and a larger log that does not extend the one held", async () => {
    const a = await log("fork-a", 4);
    const b = await log("fork-b", 4, 50);
    const sameSize = witnessOver("fork-same");
    const fromA = await push(a.notary, 0);
    expect((await sameSize.w.add(fromA.req, fromA.treeHead, NOTARY)).status).toBe(200);
    const fromB = await push(b.notary, 8);
    const r = await sameSize.w.add(fromB.req, fromB.treeHead, NOTARY);
    expect(r.status).toBe(422);
    expect(r.body).toContain("another root than the one held: two logs under one name");
    const larger = witnessOver("fork-larger");
    expect((await larger.w.add(fromA.req, fromA.treeHead, NOTARY)).status).toBe(200);
    await grow(b.store, 54, 56);
    // B has no tree head of 8 leaves of A's log: its best is a proof from its own 8 leaves.
    const bigger = await push(b.notary, 8);
    const r2 = await larger.w.add(bigger.req, bigger.treeHead, NOTARY);
    expect(r2.status).toBe(422);
    expect(r2.body).toContain("does not extend the checkpoint of 8 leaves held");
    expect(larger.counts.at(-1)).toEqual([NOTARY, "inconsistent"]);
    for (const s of [a.store, b.store]) await s.close();
    sameSize.store.close();
    larger.store.close();
  });

  test("only the log pushes its checkpoints; other logs, forged and malformed checkpoints are refused through the route", async () => {
    const { store, notary } = await log("route", 2);
    const { w, store: ws, counts } = witnessOver("route");
    const c = await push(notary, 0);
    const route = witnessRoutes({ listener: {} as ListenerConfig, witness: w });
    const post = (
      body: string,
      o: { treeHead?: string; peer?: string; method?: string; path?: string } = {},
    ) => {
      const { Readable } = require("node:stream") as typeof import("node:stream");
      return route(
        {
          method: o.method ?? "POST",
          path: o.path ?? "/.svc/witness/add-checkpoint",
          headers:
            o.treeHead === undefined ? { "svc-tree-head": c.treeHead } : { "svc-tree-head": o.treeHead },
          body: Readable.from([Buffer.from(body)]),
          peer: o.peer === "" ? undefined : { uri: o.peer ?? NOTARY },
          log: createLogger({ level: "error", encoder: "json" }),
        } as unknown as ProxyRequest,
        async () => ({ status: 404, headers: {}, body: "next" }),
      );
    };
    const body = addCheckpointBody(0, [], c.req.note);
    const other = await post(body, { peer: WITNESS_B });
    expect({ status: other.status, body: String(other.body) }).toMatchObject({ status: 403 });
    expect(String(other.body)).toContain(`${WITNESS_B} may not give the checkpoints of ${NOTARY}`);
    expect((await post(body, { peer: "" })).status).toBe(403);
    expect((await post(body, { treeHead: "" })).status).toBe(400);
    // A checkpoint whose size was changed no longer carries the notary's signature.
    const forged = c.req.note.replace(/\n4\n/, "\n5\n");
    const f = await post(addCheckpointBody(0, [], forged));
    expect(f.status).toBe(403);
    expect(String(f.body)).toContain("checkpoint verification failed");
    for (const bad of [
      "old 0\n",
      `old x\n\n${c.req.note}`,
      "old 01\n\n",
      `old 0\nnot-a-hash\n\n${c.req.note}`,
    ]) {
      const r = await post(bad);
      expect({ bad, status: r.status }).toEqual({ bad, status: 400 });
    }
    expect((await post(Buffer.from([0xff, 0xfe]).toString("latin1"))).status).toBe(400);
    expect((await post(body, { method: "GET" })).status).toBe(405);
    expect((await post(body, { path: "/other" })).body).toBe("next");
    // A log this witness does not follow: 404, counted under "unknown".
    const stranger = witnessOver("route-stranger", wb);
    const strangerRoute = new Witness({
      store: stranger.store,
      source: wb.source,
      logs: [WITNESS_A],
      log: createLogger({ level: "error", encoder: "json" }),
      count: (l, r) => void stranger.counts.push([l, r]),
    });
    expect((await strangerRoute.add(c.req, c.treeHead, NOTARY)).status).toBe(404);
    expect(stranger.counts).toEqual([["unknown", "unknown_log"]]);
    // Accepted: then GET serves the held checkpoint cosigned now.
    expect((await post(body)).status).toBe(200);
    const get = (origin: string, r = route) =>
      r(
        {
          method: "GET",
          path: `/.svc/witness/checkpoint?origin=${encodeURIComponent(origin)}`,
          headers: {},
          log: createLogger({ level: "error", encoder: "json" }),
        } as unknown as ProxyRequest,
        async () => ({ status: 404, headers: {}, body: "next" }),
      );
    const got = await get(checkpointOrigin(NOTARY));
    expect(got.status).toBe(200);
    // A witness that no longer follows the log does not vouch for what it held of it.
    const dropped = new Witness({
      store: ws,
      source: wa.source,
      logs: [WITNESS_B],
      log: createLogger({ level: "error", encoder: "json" }),
    });
    const unfollowed = await get(
      checkpointOrigin(NOTARY),
      witnessRoutes({ listener: {} as ListenerConfig, witness: dropped }),
    );
    expect(unfollowed.status).toBe(404);
    expect(String(got.body)).toStartWith(c.req.note);
    expect(String(got.body)).toContain(`— ${checkpointOrigin(WITNESS_A)} `);
    expect((await verifyCosignature(String(got.headers["svc-cosignature"]), id.bundles)).claims.size).toBe(4);
    expect(counts.map((x) => x[1])).toEqual(["forbidden", "invalid", "cosigned"]);
    await store.close();
    ws.close();
    stranger.store.close();
  });

  test("an inclusion proof asked with ?witnessed=N from a notary that pushes to fewer witnesses is refused at once", async () => {
    const { store, notary } = await log("witnessed-bound", 0);
    const { x, receipt: r0 } = await receiptFor(id, 0);
    await store.logExchange(x, r0);
    const receipt = r0.id;
    const r = await queryNotary(notary, `/.svc/receipt/${receipt}/proof?witnessed=1`);
    expect(r.status).toBe(404);
    expect(String(r.body)).toContain("no tree head can be cosigned by 1 witnesses: this notary pushes to 0");
    for (const q of [
      "witnessed=x",
      "witnessed=33",
      "witnessed=1&witnessed=2",
      "witnessed=01",
      "witness=spiffe%3A%2F%2Fexample.org%2Fw",
      "witnessed=1&witness=example.org%2Fw",
      "witnessed=2&witness=spiffe%3A%2F%2Fexample.org%2Fw",
      "witnessed=1&witness=spiffe%3A%2F%2Fexample.org%2Fw&witness=spiffe%3A%2F%2Fexample.org%2Fw",
    ])
      expect({
        q,
        status: (await queryNotary(notary, `/.svc/receipt/${receipt}/proof?${q}`)).status,
      }).toEqual({
        q,
        status: 400,
      });
    await store.close();
  });

  test("svc curl --witness: a flag without its value, a threshold without witnesses, or with --validate=false are usage errors", () => {
    const curl = (...args: string[]) => {
      const p = Bun.spawnSync([BUN, "cmd/svc.ts", "curl", ...args], { cwd: ROOT });
      return { code: p.exitCode, err: p.stderr.toString() };
    };
    const url = "http://127.0.0.1:1/";
    for (const [args, message] of [
      [["-n", "signRequest", url, "--witness"], "--witness needs a value"],
      [["-n", "signRequest", url, "--witness-threshold", "1"], "--witness-threshold goes with --witness"],
      [
        ["-n", "signRequest", "--validate=false", "--witness", WITNESS_A, url],
        "--witness needs --validate=true",
      ],
      [["--witness", WITNESS_A, url], "--witness needs -n signRequest"],
      [["-n", "signRequest", "--witness", "spiffe://Example.org/w", url], "--witness"],
      [["-n", "signRequest", "--witness", WITNESS_A, "--witness", WITNESS_A, url], "is given twice"],
      [["-n", "signRequest", "--witness", WITNESS_A, "--witness-threshold", "2", url], "from 1 to 1"],
      [["-n", "signRequest", "--witness", WITNESS_A, "--witness-threshold", "0", url], "from 1 to 1"],
    ] as const) {
      const r = curl(...args);
      expect({ args, code: r.code }).toEqual({ args, code: 1 });
      expect(r.err).toContain(message);
    }
  });

  test("the add-checkpoint body is read strictly", () => {
    const note = "example.org/notary\n1\nAAAA\n\n— x y\n";
    const h = new Uint8Array(32).fill(7);
    expect(parseAddCheckpoint(addCheckpointBody(3, [h, h], note))).toEqual({ old: 3, proof: [h, h], note });
    for (const bad of [
      "",
      "old 3",
      "old 3\n",
      "old -1\n\nx",
      "old 3 \n\nx",
      `old 3\n${"A".repeat(43)}\n\nx`,
    ]) {
      expect(() => parseAddCheckpoint(bad)).toThrow("add-checkpoint:");
    }
    const long = `old 3\n${Array(64).fill(Buffer.from(h).toString("base64")).join("\n")}\n\n${note}`;
    expect(() => parseAddCheckpoint(long)).toThrow("more than 63 proof hashes");
  });
});

describe("the notary pushing to a witness over SPIFFE mTLS", () => {
  test("pushes the log as it grows and keeps the cosignatures; a database that fails under a push ends that push, and no witness refuses the log", async () => {
    const { store } = await log("pushed", 2);
    const { w, store: ws } = witnessOver("pushed");
    const listener = await serverListener([{ type: "witness" }], {
      source: wa.source,
      log: createLogger({ level: "error", encoder: "json" }),
      witness: w,
    });
    const lines: { level: string; msg: string }[] = [];
    // The notary's reads of its log fail while `failing` is set, as a database that went away would.
    let failing = false;
    const flaky = new Proxy(store, {
      get(target, name, receiver) {
        const v = Reflect.get(target, name, receiver);
        if (name !== "node" || typeof v !== "function") return typeof v === "function" ? v.bind(target) : v;
        return (...args: unknown[]) => {
          if (failing) return Promise.reject(new Error("connection to the database lost"));
          return v.apply(target, args);
        };
      },
    });
    const pushing = new Notary({
      store: flaky,
      source: id.source,
      jwtSvid: async () => "",
      getPod: async () => undefined,
      log: createLogger({ level: "error", encoder: "json" }),
      witnesses: { count: 1, poke: () => {}, flush: () => pusher.flush() },
    });
    const pushed: string[] = [];
    const pusher: WitnessPusher = new WitnessPusher({
      notary: pushing,
      witnesses: [{ spiffeId: WITNESS_A, url: listener.url }],
      source: id.source,
      log: createLogger({ level: "debug", encoder: "json", write: (l) => void lines.push(JSON.parse(l)) }),
      intervalMs: 10_000,
      count: (_w, r) => void pushed.push(r),
    });
    try {
      await pusher.flush();
      expect(w_held(ws)).toEqual({ size: 4, refused: undefined });
      expect((await store.cosignedHead(0, { count: 1 }))?.head.size).toBe(4);
      // Nothing new: a second round signs and sends nothing.
      await pusher.flush();
      expect(pushed).toEqual(["cosigned"]);
      await grow(store, 2, 4);
      failing = true;
      await pusher.flush();
      expect(pushed.at(-1)).toBe("failed");
      expect(lines.some((l) => l.msg === "notary: cannot push the checkpoint to a witness")).toBe(true);
      expect(w_held(ws)).toEqual({ size: 4, refused: undefined });
      failing = false;
      // Callers waiting at once share one round.
      await Promise.all([pusher.flush(), pusher.flush(), pusher.flush()]);
      expect(pushed).toEqual(["cosigned", "failed", "cosigned"]);
      expect(w_held(ws)).toEqual({ size: 8, refused: undefined });
      const proof = (await pushing.proof((await lastReceipt(store)) as string, ORIGIN, {
        count: 1,
      })) as InclusionProof;
      expect(proof.treeSize).toBe(8);
      expect(proof.cosignatures).toHaveLength(1);
      // A witness that never cosigned, named as the one that counts: no proof.
      const e = await svcErrorOf(
        pushing.proof((await lastReceipt(store)) as string, ORIGIN, { count: 1, by: [WITNESS_B] }),
      );
      expect(e.message).toContain(`is cosigned by 1 witness of ${WITNESS_B} yet`);
    } finally {
      pusher.close();
      await listener.close();
      await store.close();
      ws.close();
    }
  });
});

describe("a witness polling a notary over SPIFFE mTLS", () => {
  /** A notary-query listener over mTLS as `tls` (the identity callers see), answering from `notary`. */
  const queryListener = (notary: Notary, tls: NotaryIdentity, port?: number) =>
    serverListener(
      [{ type: "notary-query" }],
      { source: tls.source, log: createLogger({ level: "error", encoder: "json" }), notary },
      port,
    );

  test("takes the notary's checkpoints as its log grows, and again after the notary was unreachable; a checkpoint of another log handed over by the one polled is refused", async () => {
    const { store, notary } = await log("polled", 2);
    const { w, store: ws, counts } = witnessOver("polled", wb);
    let served = await queryListener(notary, id);
    const lines: { msg: string }[] = [];
    const polling = startPolling(
      w,
      ws,
      [{ spiffeId: NOTARY, url: served.url }],
      wb.source,
      20,
      createLogger({ level: "debug", encoder: "json", write: (l) => void lines.push(JSON.parse(l)) }),
    );
    try {
      await waitUntil("the first checkpoint taken", () => w_held(ws).size === 4, 10_000);
      await grow(store, 2, 5);
      await waitUntil("the grown log taken", () => w_held(ws).size === 10, 10_000);
      // The notary unreachable for a while: said, and its checkpoints taken again once it is back.
      await served.close();
      await grow(store, 5, 6);
      await waitUntil(
        "the outage said",
        () => lines.some((l) => l.msg === "witness: cannot poll the log"),
        10_000,
      );
      served = await queryListener(notary, id, Number(served.url.port));
      await waitUntil("the log taken after the outage", () => w_held(ws).size === 12, 10_000);
      expect(counts.filter((c) => c[1] !== "cosigned")).toEqual([]);
    } finally {
      polling.close();
      await served.close();
    }
    // A listener with the notary's identity whose answers are another followed log's (signed by witness A).
    const other = await log("other-log", 3);
    const lying = await queryListener(notaryOver(other.store, wa), id);
    const follows = new Witness({
      store: ws,
      source: wb.source,
      logs: [NOTARY, WITNESS_A],
      log: createLogger({ level: "error", encoder: "json" }),
      count: (l, r) => void counts.push([l, r]),
    });
    const lied = startPolling(
      follows,
      ws,
      [{ spiffeId: NOTARY, url: lying.url }],
      wb.source,
      20,
      createLogger({ level: "error", encoder: "json" }),
    );
    try {
      await waitUntil(
        "the other log's checkpoint refused",
        () => counts.some((c) => c[1] === "forbidden"),
        10_000,
      );
      expect(ws.held(checkpointOrigin(WITNESS_A))).toBeUndefined();
      expect(w_held(ws)).toEqual({ size: 12, refused: undefined });
    } finally {
      lied.close();
      await lying.close();
    }
    for (const s of [store, other.store]) await s.close();
    ws.close();
  });
});

describe("a witness that both polls and takes pushes", () => {
  test("a push that lands while the witness polls makes the polled checkpoint stale, never a cut", async () => {
    const { store, notary } = await log("race", 2);
    const { w, store: ws, counts } = witnessOver("race", wb);
    const first = await push(notary, 0);
    expect((await w.add(first.req, first.treeHead, NOTARY)).status).toBe(200);
    // The notary-query listener answers the poll with the checkpoint of the log as it was, after the
    // log grew and its larger checkpoint was pushed to the same witness (in the same second).
    let raced = false;
    registerMiddleware("test-push-meanwhile", () => async (req, next) => {
      const res = await next(req);
      if (!raced && req.path === "/.svc/log/checkpoint") {
        raced = true;
        await grow(store, 2, 4);
        const larger = await push(notary, 4);
        expect((await w.add(larger.req, larger.treeHead, NOTARY)).status).toBe(200);
      }
      return res;
    });
    const served = await serverListener(
      [{ type: "test-push-meanwhile" }, { type: "notary-query" }] as unknown as ListenerConfig["middlewares"],
      { source: id.source, log: createLogger({ level: "error", encoder: "json" }), notary },
    );
    const polling = startPolling(
      w,
      ws,
      [{ spiffeId: NOTARY, url: served.url }],
      wb.source,
      20,
      createLogger({ level: "error", encoder: "json" }),
    );
    try {
      await waitUntil("the raced poll answered", () => counts.length >= 3, 10_000);
      expect(counts.slice(0, 3).map((c) => c[1])).toEqual(["cosigned", "cosigned", "stale"]);
      expect(w_held(ws)).toEqual({ size: 8, refused: undefined });
    } finally {
      polling.close();
      await served.close();
      await store.close();
      ws.close();
    }
  });
});

describe("cosignatures kept by the notary", () => {
  test("the newest cosigned head over a receipt, with its cosignatures; a witness's newest 64 kept (SQLite)", async () => {
    const store = SqliteNotaryStore.open(join(dir, "cosignatures.db"));
    await checkCosignatures(store);
    await store.close();
  });
});

describe("the witness policy", () => {
  test("counts the listed witnesses that cosigned this tree head of this log; others, and cosignatures of another head or log, do not count", async () => {
    const { store, notary } = await log("policy", 2);
    const c = await notary.checkpoint(ORIGIN);
    const head = await verifyTreeHead(c.treeHead, id.bundles);
    const root = new Uint8Array(Buffer.from(head.claims.root, "base64url"));
    const sign = (who: NotaryIdentity, o: { log?: string; size?: number; at?: Date } = {}) =>
      signCosignature(
        who.svid.id.uri,
        o.log ?? NOTARY,
        o.size ?? head.claims.size,
        root,
        svidSigner(who.svid.keyPem, who.svid.chain),
        o.at,
      );
    const [a, b] = [await sign(wa), await sign(wb)];
    const policy = { witnesses: [WITNESS_A, WITNESS_B], threshold: 2 };
    expect(await checkWitnessed(head, [a, b], policy, id.bundles)).toEqual([WITNESS_A, WITNESS_B]);
    expect(await checkWitnessed(head, [a], { ...policy, threshold: 1 }, id.bundles)).toEqual([WITNESS_A]);
    const fails = async (list: unknown, message: string, p = policy) => {
      const e = await svcErrorOf(checkWitnessed(head, list, p, id.bundles));
      expect(e.code).toBe("receipt");
      expect(e.message).toContain(message);
    };
    await fails([a], "is cosigned by spiffe://example.org/ns/edge/sa/witness-a of the witnesses");
    await fails([a, a], "is cosigned by spiffe://example.org/ns/edge/sa/witness-a of the witnesses");
    await fails(undefined, "is cosigned by none");
    await fails([a, await sign(wb, { size: 3 })], "cosigned 3 leaves");
    await fails([a, await sign(wb, { log: WITNESS_A })], `cosigned the log of ${WITNESS_A}`);
    // The notary's own tree head is no cosignature; nor is a witness outside the policy.
    await fails([a, c.treeHead], "cosignature verification failed");
    await fails([a, await sign(id)], "is cosigned by spiffe://example.org/ns/edge/sa/witness-a of");
    await fails("x", "not a list of JWS strings");
    // The notary cosigning its own log, listed as a witness, does not count.
    await fails([a, await sign(id)], "a notary is no witness of its own log", {
      witnesses: [WITNESS_A, NOTARY],
      threshold: 2,
    });
    // Cosignatures dated before the tree head (as ones made with keys that expired since would be).
    const signer = svidSigner(id.svid.keyPem, id.svid.chain);
    const later = await verifyTreeHead(
      await signTreeHead(NOTARY, ORIGIN, head.claims.size, root, signer, new Date(Date.now() + 600_000)),
      id.bundles,
    );
    const e = await svcErrorOf(checkWitnessed(later, [a, b], policy, id.bundles));
    expect(e.message).toContain("cosignature is dated");
    expect(e.message).toContain("before the tree head");
    await fails(Array(33).fill(a), "more than 32 cosignatures");
    await store.close();
  });
});
