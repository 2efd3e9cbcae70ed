import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createPublicKey, generateKeyPairSync } from "node:crypto";
import { rmSync } from "node:fs";
import { join } from "node:path";
import {
  checkpointOrigin,
  checkpointText,
  noteKey,
  signCheckpoint,
  verifyCheckpoint,
} from "../../lib/notary-objects/checkpoint.ts";
import { derToPem } from "../../lib/spiffe/cert.ts";
import { SqliteNotaryStore } from "../../proxy/notary-service/records-sqlite.ts";
import { peer } from "../e2e/testbed/peers.ts";
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

/**
 * The notary log as a C2SP checkpoint (docs/notary.md, "Checkpoints"): made over a real SQLite log and
 * checked by our verifier and by transparency-dev's (the checkpoint parser and note verifiers that
 * witnesses and Rekor use, built by `tests/e2e/build-peers.sh note`), changed checkpoints refused by both.
 */
const dir = tempDir("svc-notary-checkpoint-");
let id: NotaryIdentity;
let store: SqliteNotaryStore;

/** transparency-dev's verdict on a checkpoint: its origin, size and root, or its error. */
async function reference(note: string, vkey: string, origin: string): Promise<Record<string, unknown>> {
  const p = Bun.spawn([peer("notePeer")], { stdin: "pipe", stdout: "pipe" });
  p.stdin.write(`${JSON.stringify({ note, vkey, origin })}\n`);
  p.stdin.end();
  const out = await new Response(p.stdout).text();
  await p.exited;
  return JSON.parse(out);
}

beforeAll(async () => {
  id = await notaryIdentity();
  store = SqliteNotaryStore.open(join(dir, "notary.db"));
  for (let i = 0; i < 5; i++) {
    const { x, receipt } = await receiptFor(id, i);
    await store.logExchange(x, receipt);
  }
});
afterAll(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("checkpoints", () => {
  test("the notary's checkpoint verifies with its tree head, and transparency-dev's verifier reads the same", async () => {
    const c = await notaryOver(store, id).checkpoint(ORIGIN);
    const origin = checkpointOrigin(NOTARY);
    expect(c.note.split("\n").slice(0, 3)).toEqual([origin, "10", expect.any(String)]);
    const ours = await verifyCheckpoint(c.note, c.treeHead, id.bundles);
    expect({ origin: ours.origin, size: ours.size }).toEqual({ origin, size: 10 });
    const head = await store.head();
    expect(ours.root).toBe(Buffer.from(head.root).toString("base64url"));
    // The reference, configured with the key of the notary's SVID as note tools are (its vkey).
    const key = createPublicKey(derToPem(id.svid.chain[0]?.der as Uint8Array));
    const theirs = await reference(c.note, noteKey(origin, key).vkey, origin);
    expect(theirs).toEqual({ origin, size: 10, root: Buffer.from(head.root).toString("base64") });
    // A tree head of this size is kept: a consistency proof can start from it.
    expect((await store.treeHead(10))?.size).toBe(10);
  });

  test("Ed25519 keys sign checkpoints the reference reads too", async () => {
    const { privateKey, publicKey } = generateKeyPairSync("ed25519");
    const note = signCheckpoint(
      checkpointText("example.org/log", 3, new Uint8Array(32).fill(7)),
      "example.org/log",
      privateKey,
    );
    expect(await reference(note, noteKey("example.org/log", publicKey).vkey, "example.org/log")).toEqual({
      origin: "example.org/log",
      size: 3,
      root: Buffer.from(new Uint8Array(32).fill(7)).toString("base64"),
    });
    const rsa = generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey;
    expect(() => signCheckpoint("x\n1\nAA==\n", "x", rsa)).toThrow(
      "checkpoints are signed with an ECDSA or Ed25519 key",
    );
  });

  test("a changed checkpoint is refused by both verifiers, naming what is wrong", async () => {
    const c = await notaryOver(store, id).checkpoint(ORIGIN);
    const origin = checkpointOrigin(NOTARY);
    const vkey = noteKey(origin, createPublicKey(derToPem(id.svid.chain[0]?.der as Uint8Array))).vkey;
    const [text, sig] = c.note.split("\n\n") as [string, string];
    const lines = text.split("\n");
    const changed: [string, string, string][] = [
      ["size", `${[lines[0], "11", lines[2]].join("\n")}\n\n${sig}`, "it says 11 leaves"],
      [
        "root",
        `${[lines[0], lines[1], Buffer.alloc(32).toString("base64")].join("\n")}\n\n${sig}`,
        "with root",
      ],
      [
        "origin",
        `${["example.org/other", lines[1], lines[2]].join("\n")}\n\n${sig}`,
        'its origin is "example.org/other"',
      ],
      ["extension line", `${text}\nextra\n\n${sig}`, "the text has 4 lines"],
      [
        "signature",
        // A character well inside the signature: the last one before padding may carry unused bits,
        // and changing those makes the line's base64 malformed instead.
        `${text}\n\n${flipAt(sig, sig.lastIndexOf(" ") + 20)}`,
        "does not verify",
      ],
      ["no signature", `${text}\n\n`, "is not"],
      ["control character", c.note.replace(lines[1] as string, `${lines[1]}\u0007`), "control character"],
    ];
    for (const [what, note, message] of changed) {
      const e = await svcErrorOf(verifyCheckpoint(note, c.treeHead, id.bundles));
      expect({ what, code: e.code }).toEqual({ what, code: "receipt" });
      expect({ what, message: e.message }).toEqual({ what, message: expect.stringContaining(message) });
      if (what !== "origin")
        expect({ what, ...(await reference(note, vkey, origin)) }).toHaveProperty("error");
    }
    // Another key's signature under the notary's name is not the tree head's key.
    const other = generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey;
    const forged = signCheckpoint(`${text}\n`, origin, other);
    expect((await svcErrorOf(verifyCheckpoint(forged, c.treeHead, id.bundles))).message).toContain(
      "no signature by",
    );
  });

  test("GET /.svc/log/checkpoint answers the note with its tree head in Svc-Tree-Head; an empty log has none", async () => {
    const get = (s: SqliteNotaryStore) => queryNotary(notaryOver(s, id), "/.svc/log/checkpoint");
    const r = await get(store);
    expect(r.status).toBe(200);
    expect(r.headers["content-type"]).toBe("text/plain; charset=utf-8");
    expect(
      (await verifyCheckpoint(String(r.body), String(r.headers["svc-tree-head"]), id.bundles)).size,
    ).toBe(10);
    const empty = SqliteNotaryStore.open(join(dir, "empty.db"));
    const none = await get(empty);
    expect(none.status).toBe(404);
    expect(String(none.body)).toContain("the log is empty");
    await empty.close();
  });
});

/** `s` with the character at `i` changed (A to B, anything else to A). */
const flipAt = (s: string, i: number) => `${s.slice(0, i)}${s[i] === "A" ? "B" : "A"}${s.slice(i + 1)}`;
