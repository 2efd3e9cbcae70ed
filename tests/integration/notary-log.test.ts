import { Database } from "bun:sqlite";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { DevCa } from "../../lib/dev/ca.ts";
import { svidSigner } from "../../lib/notary-objects/jws.ts";
import { type InclusionProof, verifyReceiptInclusion } from "../../lib/notary-objects/log.ts";
import { BundleSet, X509Bundle } from "../../lib/spiffe/bundle.ts";
import { derToPem, parseCert } from "../../lib/spiffe/cert.ts";
import type { SvidSource } from "../../lib/spiffe/x509-source.ts";
import { parseX509Svid, type X509Svid } from "../../lib/spiffe/x509svid.ts";
import { checkLog } from "../../proxy/notary-service/log-check.ts";
import { SqliteNotaryStore } from "../../proxy/notary-service/records-sqlite.ts";
import { tempDir } from "../support/dev-api.ts";
import { svcErrorOf } from "../support/errors.ts";
import {
  exchange,
  NOTARY,
  type NotaryIdentity,
  notaryIdentity,
  notaryOver,
  ORIGIN,
  receiptFor,
} from "../support/notary-fixtures.ts";
import { BUN, ROOT } from "../support/proc.ts";

/**
 * The notary log on SQLite: receipts proven against signed tree heads and checked offline; records
 * edited, deleted or inserted directly in the database found by the consistency check, and by the
 * offline check of a proof; a database of the version before the log joins it on upgrade.
 */
const dir = tempDir("svc-notary-log-");
let id: NotaryIdentity;
let svid: X509Svid;
let bundles: BundleSet;
let source: SvidSource;

beforeAll(async () => {
  id = await notaryIdentity();
  ({ svid, bundles, source } = id);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function addReceipt(store: SqliteNotaryStore, n: number): Promise<{ id: string; jws: string }> {
  const { x, receipt } = await receiptFor(id, n);
  await store.logExchange(x, receipt);
  return receipt;
}

/** A store with a certificate, a statement, 12 signed receipts and 3 logged requests. */
async function filled(name: string) {
  const store = SqliteNotaryStore.open(join(dir, `${name}.db`));
  await store.putCertificate("C".repeat(43), svid.chain[0]?.der as Uint8Array, NOTARY, svid.notAfter);
  await store.putStatement("S".repeat(43), "h.p.s", NOTARY, "C".repeat(43));
  const receipts = [];
  for (let i = 0; i < 12; i++) receipts.push(await addReceipt(store, i));
  for (let i = 100; i < 103; i++) await store.logExchange(exchange(i));
  return { store, receipts, notary: notaryOver(store, id), db: new Database(join(dir, `${name}.db`)) };
}

describe("the notary log", () => {
  test("every receipt has a proof against a signed tree head that verifies offline", async () => {
    const { store, receipts, notary } = await filled("proofs");
    expect((await store.head()).size).toBe(2 + 12 * 2 + 3);
    const first = (await notary.proof(receipts[0]?.id as string, ORIGIN)) as InclusionProof;
    for (const r of receipts) {
      const proof = (await notary.proof(r.id, ORIGIN)) as InclusionProof;
      const head = await verifyReceiptInclusion(r.jws, JSON.parse(JSON.stringify(proof)), bundles);
      expect(head.claims.size).toBe(29);
      expect(head.issuer.uri).toBe(NOTARY);
      // The tree head covering it is reused, not signed again.
      expect(proof.treeHead).toBe(first.treeHead);
    }
    // A receipt proven at one place does not pass at another, nor another receipt at its place.
    const p0 = (await notary.proof(receipts[0]?.id as string, ORIGIN)) as InclusionProof;
    await expect(verifyReceiptInclusion(receipts[1]?.jws as string, p0, bundles)).rejects.toThrow(
      "the receipt is not leaf",
    );
    // The log grows: a new receipt gets a new tree head that covers it.
    const later = await addReceipt(store, 50);
    const proof = (await notary.proof(later.id, ORIGIN)) as InclusionProof;
    expect(proof.treeSize).toBe(31);
    expect((await verifyReceiptInclusion(later.jws, proof, bundles)).claims.size).toBe(31);
    expect(await notary.proof("N".repeat(43), ORIGIN)).toBeUndefined();
    expect((await checkLog(store, source)).problems).toEqual([]);
    await store.close();
  });

  test("a tree head signed by a CA outside the bundle, or a proof with its size or index changed, is refused offline", async () => {
    const { store, receipts, notary } = await filled("heads");
    const r = receipts[3] as { id: string; jws: string };
    const proof = (await notary.proof(r.id, ORIGIN)) as InclusionProof;
    const stranger = new BundleSet([
      new X509Bundle("example.org", [parseCert((await DevCa.open("example.org")).caDer)]),
    ]);
    await expect(verifyReceiptInclusion(r.jws, proof, stranger)).rejects.toThrow(
      "tree head verification failed",
    );
    await expect(verifyReceiptInclusion(r.jws, { ...proof, treeSize: 40 }, bundles)).rejects.toThrow(
      "the proof is for a tree of 40 leaves",
    );
    await expect(verifyReceiptInclusion(r.jws, { ...proof, leafIndex: 99 }, bundles)).rejects.toThrow(
      "leaf index 99 is not in a tree",
    );
    await expect(verifyReceiptInclusion(r.jws, { ...proof, path: ["x"] }, bundles)).rejects.toThrow(
      "path[0] is not a base64url SHA-256 hash",
    );
    // Another workload of the trust domain signs a tree head over a log of its own holding the receipt.
    const other = await id.ca.issueX509Svid("spiffe://example.org/ns/edge/sa/mallory", 3_600_000);
    const mallory = parseX509Svid(other.certDer, other.keyDer);
    const { leafData, signTreeHead } = await import("../../lib/notary-objects/log.ts");
    const { leafHash } = await import("../../lib/notary-objects/merkle.ts");
    const forged = await signTreeHead(
      mallory.id.uri,
      ORIGIN,
      1,
      leafHash(leafData("receipt", r.jws)),
      svidSigner(mallory.keyPem, mallory.chain),
    );
    await expect(
      verifyReceiptInclusion(
        r.jws,
        { receiptId: r.id, leafIndex: 0, treeSize: 1, path: [], treeHead: forged },
        bundles,
      ),
    ).rejects.toThrow(
      `the tree head is signed by spiffe://example.org/ns/edge/sa/mallory, not by the receipt's issuer ${NOTARY}`,
    );
    await store.close();
  });

  test("a receipt edited in the database is reported, no proof is served for it, and an earlier proof fails", async () => {
    const { store, receipts, notary, db } = await filled("edited");
    const r = receipts[4] as { id: string; jws: string };
    const proof = (await notary.proof(r.id, ORIGIN)) as InclusionProof;
    const edited = `${r.jws.slice(0, -4)}AAAA`;
    db.query("UPDATE receipts SET jws = ? WHERE id = ?").run(edited, r.id);
    const check = await checkLog(store, source);
    expect(check.problems).toEqual([
      expect.stringMatching(
        new RegExp(`^leaf \\d+ \\(receipt ${r.id}\\): the record does not hash to its leaf`),
      ),
    ]);
    const e = await svcErrorOf(notary.proof(r.id, ORIGIN));
    expect(e.code).toBe("notary_unavailable");
    expect(e.message).toContain(`does not prove receipt ${r.id}`);
    await expect(verifyReceiptInclusion(edited, proof, bundles)).rejects.toThrow("the receipt is not leaf");
    await store.close();
  });

  test("an exchange whose body was edited, a deleted receipt and a record inserted around the notary are reported", async () => {
    const { store, receipts, db } = await filled("deleted");
    db.query("UPDATE exchanges SET response_body = ? WHERE request_id = 'req-100'").run(new Uint8Array([1]));
    db.query("DELETE FROM receipts WHERE id = ?").run(receipts[7]?.id as string);
    db.query(
      "INSERT INTO statements (id, jws, subject, certificate_id, created_at) VALUES ('F', 'f.f.f', 'x', 'y', 0)",
    ).run();
    const problems = (await checkLog(store, source)).problems;
    expect(problems).toContainEqual(
      expect.stringMatching(/^leaf \d+ \(exchange \d+\): the record does not hash/),
    );
    expect(problems).toContainEqual(
      expect.stringMatching(new RegExp(`^leaf \\d+ \\(receipt ${receipts[7]?.id}\\): the record is missing`)),
    );
    expect(problems).toContain("statement F: stored but not in the log (written around the notary)");
    expect(problems).toHaveLength(3);
    await store.close();
  });

  test("rewriting a leaf's hash with its record, or cutting the log's tail, breaks the signed tree heads", async () => {
    const { store, receipts, notary, db } = await filled("rewritten");
    await notary.proof(receipts[11]?.id as string, ORIGIN);
    const r = receipts[2] as { id: string; jws: string };
    const forged = `${r.jws.slice(0, -4)}BBBB`;
    const { leafData } = await import("../../lib/notary-objects/log.ts");
    const { leafHash } = await import("../../lib/notary-objects/merkle.ts");
    db.query("UPDATE receipts SET jws = ? WHERE id = ?").run(forged, r.id);
    db.query("UPDATE log_leaves SET hash = ? WHERE kind = 'receipt' AND ref = ?").run(
      leafHash(leafData("receipt", forged)),
      r.id,
    );
    const problems = (await checkLog(store, source)).problems;
    expect(problems).toContain(
      "tree head of size 29: the leaves do not hash to its root (the log was changed)",
    );
    expect(problems).toContain("the log's head does not match its leaves (the log was changed)");

    const cut = await filled("cut");
    await cut.notary.proof(cut.receipts[11]?.id as string, ORIGIN);
    cut.db.query("DELETE FROM log_leaves WHERE idx >= 27").run();
    cut.db.query("DELETE FROM exchanges WHERE request_id IN ('req-101', 'req-102')").run();
    const cutProblems = (await checkLog(cut.store, source)).problems;
    expect(cutProblems).toContain(
      "the log's head counts 29 leaves, 27 are stored (leaves were deleted or added)",
    );
    expect(cutProblems).toContain("tree head of size 29: the log has only 27 leaves (leaves were deleted)");
    await store.close();
    await cut.store.close();
  });

  test("a log head whose right edge does not fit its size is reported, and nothing more is appended to it", async () => {
    const { store, db } = await filled("bad-head");
    db.query("UPDATE log_head SET frontier = x'00'").run();
    expect((await checkLog(store, source)).problems).toContain(
      "the notary log's head is corrupt (its right edge does not fit a tree of 29 leaves); check the database with svc notary verify --database",
    );
    const e = await svcErrorOf(store.logExchange(exchange(500)));
    expect(e.code).toBe("notary_unavailable");
    expect(e.message).toContain("the notary log's head is corrupt");
    await store.close();
  });

  test("a forged tree head row is reported by its signature, and never served", async () => {
    const { store, db, receipts, notary } = await filled("forged-head");
    db.query("INSERT INTO tree_heads (size, root, jws, created_at) VALUES (5, ?, 'a.b.c', 0)").run(
      new Uint8Array(32),
    );
    const problems = (await checkLog(store, source)).problems;
    expect(problems[0]).toStartWith("tree head of size 5: tree head verification failed");
    expect(problems).toContain(
      "tree head of size 5: the leaves do not hash to its root (the log was changed)",
    );
    // One with the right root but no valid signature is never served: the notary signs a new one.
    const r = receipts[11] as { id: string; jws: string };
    const head = await store.head();
    db.query("INSERT INTO tree_heads (size, root, jws, created_at) VALUES (?, ?, 'a.b.c', 0)").run(
      head.size,
      head.root,
    );
    const proof = (await notary.proof(r.id, ORIGIN)) as InclusionProof;
    expect(proof.treeHead).not.toBe("a.b.c");
    expect((await verifyReceiptInclusion(r.jws, proof, bundles)).claims.size).toBe(head.size);
    await store.close();
  });

  test("svc notary verify checks a receipt with its proof, and a whole database", async () => {
    const { store, receipts, notary, db } = await filled("cli");
    const r = receipts[5] as { id: string; jws: string };
    const files = {
      bundle: join(dir, "bundle.pem"),
      receipt: join(dir, "receipt.jws"),
      proof: join(dir, "proof.json"),
      other: join(dir, "other.json"),
    };
    writeFileSync(
      files.bundle,
      derToPem(bundles.getX509Bundle("example.org")?.authorities[0]?.der as Uint8Array),
    );
    writeFileSync(files.receipt, r.jws);
    writeFileSync(files.proof, JSON.stringify(await notary.proof(r.id, ORIGIN)));
    writeFileSync(files.other, JSON.stringify(await notary.proof(receipts[6]?.id as string, ORIGIN)));
    const svc = (...args: string[]) => {
      const p = Bun.spawnSync([BUN, "cmd/svc.ts", "notary", "verify", "--bundle", files.bundle, ...args], {
        cwd: ROOT,
      });
      return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
    };
    const ok = svc(files.receipt, "--proof", files.proof);
    expect(ok.err).toBe(
      `svc notary verify: receipt ${r.id} verified: signature and chain, its place in the notary log\nsvc notary verify: the request and response bodies were not checked (not in ${files.receipt}; pass --request-body / --response-body)\n`,
    );
    expect(ok.out).toContain(
      `In the notary log: leaf ${JSON.parse(readFileSync(files.proof, "utf8")).leafIndex} of 29, tree head signed by ${NOTARY}`,
    );
    expect(ok.code).toBe(0);
    const wrong = svc(files.receipt, "--proof", files.other);
    expect(wrong.code).toBe(3);
    expect(wrong.err).toContain("the proof is for receipt");
    const path = join(dir, "cli.db");
    const clean = svc("--database", path);
    expect(clean.out).toBe(`${path}: the notary log is consistent: 29 records, 1 signed tree heads\n`);
    expect(clean.code).toBe(0);
    db.query("DELETE FROM receipts WHERE id = ?").run(r.id);
    const broken = svc("--database", path);
    expect(broken.code).toBe(3);
    expect(broken.out).toMatch(
      new RegExp(`^leaf \\d+ \\(receipt ${r.id}\\): the record is missing \\(deleted\\)\\n$`),
    );
    expect(broken.err).toBe(`svc: ${path}: the notary log failed its check: 1 problem\n`);
    expect(svc("--database", path, files.receipt).err).toContain("--database checks a whole log");
    await store.close();
  });

  test("a database written before the log joins it on upgrade, and its receipts get proofs", async () => {
    const path = join(dir, "v1.db");
    const old1 = await receiptFor(id, 1);
    const old = new Database(path, { create: true });
    old.run(`CREATE TABLE certificates (
       id TEXT PRIMARY KEY, der BLOB NOT NULL, spiffe_id TEXT NOT NULL, not_after INTEGER NOT NULL, created_at INTEGER NOT NULL);
     CREATE TABLE statements (
       id TEXT PRIMARY KEY, jws TEXT NOT NULL, subject TEXT NOT NULL, certificate_id TEXT NOT NULL, created_at INTEGER NOT NULL);
     CREATE TABLE exchanges (
       id INTEGER PRIMARY KEY AUTOINCREMENT, request_id TEXT NOT NULL, statement_id TEXT NOT NULL,
       level TEXT NOT NULL, method TEXT NOT NULL, path TEXT NOT NULL, request_headers TEXT NOT NULL,
       request_body BLOB NOT NULL, status INTEGER NOT NULL, response_headers TEXT NOT NULL,
       response_body BLOB NOT NULL, created_at INTEGER NOT NULL);
     CREATE INDEX exchanges_request_id ON exchanges (request_id);
     CREATE TABLE receipts (
       id TEXT PRIMARY KEY, jws TEXT NOT NULL, statement_id TEXT NOT NULL, exchange_id INTEGER NOT NULL, created_at INTEGER NOT NULL);
     INSERT INTO exchanges VALUES (1, 'req-1', 'S', 'signRequest', 'POST', '/', '{}', x'00', 200, '{}', x'01', 10);
     INSERT INTO receipts VALUES ('R1', '${old1.receipt.jws}', 'S', 1, 11);
     PRAGMA user_version = 1;`);
    old.close();
    const store = SqliteNotaryStore.open(path);
    expect((await store.head()).size).toBe(2);
    expect((await checkLog(store, source)).problems).toEqual([]);
    const proof = (await notaryOver(store, id).proof("R1", ORIGIN)) as InclusionProof;
    expect((await verifyReceiptInclusion(old1.receipt.jws, proof, bundles)).claims.size).toBe(2);
    await store.close();
  });
});
