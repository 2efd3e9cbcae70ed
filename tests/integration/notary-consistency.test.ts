import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type ConsistencyProof, verifyConsistencyProof } from "../../lib/notary-objects/log.ts";
import { derToPem } from "../../lib/spiffe/cert.ts";
import type { Notary } from "../../proxy/notary-service/notary.ts";
import { SqliteNotaryStore } from "../../proxy/notary-service/records-sqlite.ts";
import { tempDir } from "../support/dev-api.ts";
import { svcErrorOf } from "../support/errors.ts";
import {
  NOTARY,
  type NotaryIdentity,
  notaryIdentity,
  notaryOver,
  ORIGIN,
  queryNotary,
  receiptFor,
} from "../support/notary-fixtures.ts";
import { BUN, ROOT } from "../support/proc.ts";

/**
 * Consistency proofs of the notary log (docs/notary.md, "Consistency proofs"): made by the notary over a
 * real SQLite log and checked before they are served; the notary-query route and its refusals; `svc
 * notary verify --consistency` offline, with a tree head kept from before; a log restored from an old
 * backup and grown again (a cut), and two logs under one notary (a fork), caught against a kept head.
 */
const dir = tempDir("svc-notary-consistency-");
let id: NotaryIdentity;
const files = { bundle: "", proof: "", kept: "" };

beforeAll(async () => {
  id = await notaryIdentity();
  files.bundle = join(dir, "bundle.pem");
  files.proof = join(dir, "consistency.json");
  files.kept = join(dir, "kept.json");
  writeFileSync(
    files.bundle,
    derToPem(id.bundles.getX509Bundle("example.org")?.authorities[0]?.der as Uint8Array),
  );
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/**
 * A log of `n` receipts (receipt i records exchange `offset + i`; two leaves each), and its notary, which
 * gives out a tree head of the log after each receipt (as callers' proofs would make it).
 */
async function log(name: string, n: number, offset = 0) {
  const store = SqliteNotaryStore.open(join(dir, `${name}.db`));
  const notary = notaryOver(store, id);
  await grow(store, notary, offset, offset + n);
  return { store, notary };
}

/** Receipts `from` to `to` logged, a tree head given out after each; the last receipt's ID. */
async function grow(store: SqliteNotaryStore, notary: Notary, from: number, to: number): Promise<string> {
  let last = "";
  for (let i = from; i < to; i++) {
    const { x, receipt } = await receiptFor(id, i);
    await store.logExchange(x, receipt);
    await notary.consistency(0, undefined, ORIGIN);
    last = receipt.id;
  }
  return last;
}

const svc = (...args: string[]) => {
  const p = Bun.spawnSync([BUN, "cmd/svc.ts", "notary", "verify", "--bundle", files.bundle, ...args], {
    cwd: ROOT,
  });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
};

describe("consistency proofs of the notary log", () => {
  test("from every tree head given out to every size of a log of 20 leaves, the notary's proof verifies offline", async () => {
    const { store, notary } = await log("pairs", 10);
    const size = (await store.head()).size;
    expect(size).toBe(20);
    const given = [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20];
    for (let to = 1; to <= size; to++)
      for (const from of given.filter((f) => f <= to)) {
        const proof = await notary.consistency(from, to, ORIGIN);
        const heads = await verifyConsistencyProof(proof, id.bundles);
        expect(heads.to.claims.size).toBe(to);
        expect(heads.to.issuer.uri).toBe(NOTARY);
        expect(heads.from?.claims.size).toBe(from === 0 ? undefined : from);
      }
    // A head is kept for each size given out, not for each earlier size a proof went to: asking cannot
    // grow the database.
    expect((await store.treeHeads()).map((h) => h.size)).toEqual(given.slice(1));
    // Without `to`: up to the log as it is now.
    expect((await notary.consistency(4, undefined, ORIGIN)).toSize).toBe(20);
    for (const [from, to, message] of [
      [21, undefined, "from (21) is larger than to (20)"],
      [2, 21, "the log has 20 leaves, not 21"],
      [5, 4, "from (5) is larger than to (4)"],
      [3, undefined, "no tree head of 3 leaves was given out: ask from the size of a tree head you hold"],
    ] as const) {
      const e = await svcErrorOf(notary.consistency(from, to, ORIGIN));
      expect({ code: e.code, message: e.message }).toEqual({ code: "usage", message });
    }
    await store.close();
  });

  test("a proof or tree head changed on its way fails offline, naming what does not hold", async () => {
    const { store, notary } = await log("tampered", 6);
    const good = await notary.consistency(4, 12, ORIGIN);
    const other = await notary.consistency(6, 12, ORIGIN);
    const fails = async (p: unknown, message: string) => {
      const e = await svcErrorOf(verifyConsistencyProof(p as ConsistencyProof, id.bundles));
      expect(e.code).toBe("receipt");
      expect(e.message).toContain(message);
    };
    const flipped = good.path.map((h, i) => (i === 0 ? `${h[0] === "A" ? "B" : "A"}${h.slice(1)}` : h));
    await fails({ ...good, path: flipped }, "is not the first part of the log of 12 leaves");
    await fails({ ...good, path: good.path.slice(1) }, "is not the first part");
    await fails({ ...good, from: other.from }, "the tree head `from` has 6 leaves, not 4");
    await fails({ ...good, fromSize: 6, from: other.from }, "is not the first part");
    await fails({ ...good, to: good.from }, "the tree head `to` has 4 leaves, not 12");
    await fails({ ...good, fromSize: 13 }, "are not sizes with fromSize ≤ toSize");
    await fails({ ...good, path: [...good.path.slice(0, -1), "x"] }, "path[");
    await fails({ ...good, from: undefined }, "the tree head `from` is missing");
    await fails({ ...good, to: "a.b.c" }, "tree head verification failed");
    await fails(null, "not a JSON object");
    await store.close();
  });

  test("GET /.svc/log/consistency serves the proof, and refuses what is not one number of leaves", async () => {
    const { store, notary } = await log("route", 4);
    const get = (path: string, method = "GET") => queryNotary(notary, path, method);
    const ok = await get("/.svc/log/consistency?from=4&to=8");
    expect(ok.status).toBe(200);
    const proof = JSON.parse(String(ok.body)) as ConsistencyProof;
    expect((await verifyConsistencyProof(proof, id.bundles)).to.claims.size).toBe(8);
    expect(JSON.parse(String((await get("/.svc/log/consistency?from=0")).body)).toSize).toBe(8);
    for (const [path, status, message] of [
      ["/.svc/log/consistency", 400, "from is required"],
      ["/.svc/log/consistency?from=abc", 400, 'from="abc" is not one number of leaves'],
      ["/.svc/log/consistency?from=-1", 400, 'from="-1" is not one number'],
      ["/.svc/log/consistency?from=01", 400, 'from="01" is not one number'],
      ["/.svc/log/consistency?from=1&from=2", 400, 'from="1,2" is not one number'],
      ["/.svc/log/consistency?from=1&to=1e3", 400, 'to="1e3" is not one number'],
      ["/.svc/log/consistency?from=99999999999999999", 400, "is not one number"],
      ["/.svc/log/consistency?from=2&to=9", 404, "the log has 8 leaves, not 9"],
      ["/.svc/log/consistency?from=5&to=4", 404, "from (5) is larger than to (4)"],
      ["/.svc/log/consistency?from=3", 404, "no tree head of 3 leaves was given out"],
    ] as const) {
      const r = await get(path);
      expect({ path, status: r.status }).toEqual({ path, status });
      expect(String(r.body)).toContain(message);
    }
    expect((await get("/.svc/log/consistency?from=1", "POST")).status).toBe(405);
    // Other paths under /.svc/log are not this route.
    expect((await get("/.svc/log/consistencyx?from=1")).body).toBe("next");
    await store.close();
  });

  test("svc notary verify --consistency: a later log extends the tree head kept from before; a cut or forked log is refused (exit 3)", async () => {
    // A backup taken at 6 leaves (closed first: SQLite's WAL is folded into the file).
    (await log("honest", 3)).store.close();
    copyFileSync(join(dir, "honest.db"), join(dir, "backup.db"));
    const store = SqliteNotaryStore.open(join(dir, "honest.db"));
    const notary = notaryOver(store, id);
    const receipt = await grow(store, notary, 3, 5);
    // The user keeps an inclusion proof, with its tree head of 10 leaves.
    writeFileSync(files.kept, JSON.stringify(await notary.proof(receipt, ORIGIN)));
    await grow(store, notary, 5, 9);
    writeFileSync(files.proof, JSON.stringify(await notary.consistency(10, undefined, ORIGIN)));
    const ok = svc("--consistency", files.proof, "--tree-head", files.kept);
    expect(ok.err).toBe(
      "svc notary verify: consistency proof verified: the log still extends the tree head of 10 leaves you kept\n",
    );
    expect(ok.out).toStartWith("The log of 10 leaves (root ");
    expect(ok.code).toBe(0);
    const json = svc("--consistency", files.proof, "--tree-head", files.kept, "-o", "json");
    expect(JSON.parse(json.out)).toMatchObject({ fromSize: 10, toSize: 18, signedBy: NOTARY });
    // A proof that ends at the kept head (from 0, or an old one) says nothing of the log after it.
    writeFileSync(join(dir, "ends.json"), JSON.stringify(await notary.consistency(4, 10, ORIGIN)));
    expect(svc("--consistency", join(dir, "ends.json"), "--tree-head", files.kept).err).toContain(
      "the proof starts at 4: ask for /.svc/log/consistency?from=10",
    );
    await store.close();

    // The cut: the log restored from the backup (the receipts the kept head covers gone, with every tree
    // head over them) and grown again with other records, giving out tree heads as it grows. Its proof
    // from 10 verifies as a proof; against the kept head it does not.
    const cut = SqliteNotaryStore.open(join(dir, "backup.db"));
    const cutNotary = notaryOver(cut, id);
    await grow(cut, cutNotary, 100, 106);
    writeFileSync(files.proof, JSON.stringify(await cutNotary.consistency(10, undefined, ORIGIN)));
    const caught = svc("--consistency", files.proof, "--tree-head", files.kept);
    expect(caught.code).toBe(3);
    expect(caught.err).toContain("consistency proof verification failed: the log of 10 leaves has root");
    expect(caught.err).toContain("but the tree head you kept says");
    expect(caught.err).toContain("(the log was forked or rewritten)");
    await cut.close();

    // A fork: another database under the same notary, with other records from the start.
    const fork = await log("fork", 7, 50);
    writeFileSync(files.proof, JSON.stringify(await fork.notary.consistency(10, 14, ORIGIN)));
    expect(svc("--consistency", files.proof, "--tree-head", files.kept).code).toBe(3);
    // A kept head of a size the proof does not start at: the user is told which proof to ask for.
    writeFileSync(files.proof, JSON.stringify(await fork.notary.consistency(4, 14, ORIGIN)));
    const elsewhere = svc("--consistency", files.proof, "--tree-head", files.kept);
    expect(elsewhere.code).toBe(1);
    expect(elsewhere.err).toContain("ask for /.svc/log/consistency?from=10");
    await fork.store.close();
  });

  test("usage: --consistency needs --tree-head and no FILE; --tree-head only with it", () => {
    expect(svc("--consistency", files.proof).err).toContain("--consistency needs --tree-head");
    expect(svc("--tree-head", files.kept).err).toContain("--tree-head goes with --consistency");
    expect(svc("--consistency", files.proof, files.kept).err).toContain(
      "--consistency checks a consistency proof: give it without FILE",
    );
    writeFileSync(join(dir, "garbage.json"), "{nope");
    const bad = svc("--consistency", join(dir, "garbage.json"), "--tree-head", files.kept);
    expect(bad.code).toBe(1);
    expect(bad.err).toContain("--consistency: not JSON");
  });
});
