/**
 * The notary log's tree head as a C2SP checkpoint (docs/notary.md, "Checkpoints"): a signed note whose
 * text is the origin (the notary's SPIFFE ID without `spiffe://`), the tree size and the root in base64,
 * signed with the notary's X.509-SVID key as signed-note signature type 0x02 (ECDSA over SHA-256, key ID
 * the first four bytes of SHA-256 over the key's SPKI, as transparency-dev's witness and Rekor use) or
 * 0x01 (Ed25519). The SVID key rotates, so a checkpoint travels with the JWS tree head of the same size
 * and root, whose x5c chain says whose key it is.
 */
import { createHash, createPublicKey, type KeyObject, sign, verify } from "node:crypto";
import { SvcError } from "../errors.ts";
import type { BundleSource } from "../spiffe/bundle.ts";
import { derToPem } from "../spiffe/cert.ts";
import type { VerifiedJws } from "./jws.ts";
import { type TreeHeadClaims, verifyTreeHead } from "./log.ts";
import type { Hash } from "./merkle.ts";

/** Signatures past this many, or a note past this size, are refused (the format asks for at least 16). */
const MAX_SIGNATURES = 32;
export const MAX_NOTE_BYTES = 64 * 1024;

/** The origin line and key name of the notary with this SPIFFE ID. */
export const checkpointOrigin = (spiffeId: string) => spiffeId.replace(/^spiffe:\/\//, "");

export function checkpointText(origin: string, size: number, root: Hash): string {
  return `${origin}\n${size}\n${Buffer.from(root).toString("base64")}\n`;
}

const sha256 = (...parts: (Uint8Array | string)[]) => {
  const h = createHash("sha256");
  for (const p of parts) h.update(p);
  return h.digest();
};

/**
 * A public key as a note key: its signature type, its 4-byte ID, and the verifier key string
 * (`name+hex ID+base64(type || key)`) that note tools are configured with.
 */
export function noteKey(name: string, key: KeyObject): { type: number; id: Buffer; vkey: string } {
  const pub = key.type === "private" ? createPublicKey(key) : key;
  const spki = pub.export({ type: "spki", format: "der" });
  let type: number;
  let bytes: Buffer;
  let id: Buffer;
  if (pub.asymmetricKeyType === "ec") {
    type = 0x02;
    bytes = spki;
    id = sha256(spki).subarray(0, 4);
  } else if (pub.asymmetricKeyType === "ed25519") {
    type = 0x01;
    bytes = spki.subarray(spki.length - 32);
    id = sha256(name, "\n", Uint8Array.of(type), bytes).subarray(0, 4);
  } else
    throw new SvcError(
      "notary",
      `checkpoints are signed with an ECDSA or Ed25519 key; this SVID's key is ${pub.asymmetricKeyType}`,
    );
  return {
    type,
    id,
    vkey: `${name}+${id.toString("hex")}+${Buffer.concat([Uint8Array.of(type), bytes]).toString("base64")}`,
  };
}

/** The signature line of `text` signed with `key` under `name`, ending in a newline. */
export function noteSignature(text: string, name: string, key: KeyObject): string {
  const { type, id } = noteKey(name, key);
  const data = Buffer.from(text);
  const signature = type === 0x02 ? sign("sha256", data, { key, dsaEncoding: "der" }) : sign(null, data, key);
  return `— ${name} ${Buffer.concat([id, signature]).toString("base64")}\n`;
}

/** The checkpoint of `text` signed with `key` under `name`. */
export const signCheckpoint = (text: string, name: string, key: KeyObject): string =>
  `${text}\n${noteSignature(text, name, key)}`;

interface NoteSignature {
  name: string;
  id: Buffer;
  signature: Buffer;
}

const bad = (why: string) => new SvcError("receipt", `checkpoint verification failed: ${why}`);

/** A signed note read as the signed-note format says, strictly: its text and its signature lines. */
function parseNote(note: string): { text: string; signatures: NoteSignature[] } {
  if (Buffer.byteLength(note) > MAX_NOTE_BYTES) throw bad(`the note is over ${MAX_NOTE_BYTES} bytes`);
  for (let i = 0; i < note.length; i++) {
    const c = note.charCodeAt(i);
    if (c < 0x20 && c !== 0x0a) throw bad("the note holds a control character");
  }
  const split = note.lastIndexOf("\n\n");
  if (split < 0 || !note.endsWith("\n"))
    throw bad("no blank line before the signatures, or no final newline");
  const text = note.slice(0, split + 1);
  const lines = note.slice(split + 2, -1).split("\n");
  if (lines.length > MAX_SIGNATURES) throw bad(`more than ${MAX_SIGNATURES} signatures`);
  const signatures = lines.map((line) => {
    const m = /^— ([^ +\s]+) ([A-Za-z0-9+/]+={0,2})$/u.exec(line);
    const raw = m ? Buffer.from(m[2] as string, "base64") : undefined;
    if (!m || !raw || raw.length < 5 || raw.toString("base64") !== m[2])
      throw bad(`signature line ${JSON.stringify(line.slice(0, 80))} is not "— name base64"`);
    return { name: m[1] as string, id: raw.subarray(0, 4), signature: raw.subarray(4) };
  });
  return { text, signatures };
}

/**
 * A tree size written in decimal, as checkpoints, add-checkpoint requests, a witness's 409 and the query
 * routes write it: digits without a leading zero, a safe integer; undefined for anything else.
 */
export function treeSize(text: string): number | undefined {
  if (!/^(0|[1-9][0-9]{0,15})$/.test(text)) return undefined;
  const n = Number(text);
  return Number.isSafeInteger(n) ? n : undefined;
}

/** The three lines of a checkpoint's text (extension lines are refused: this log writes none). */
function parseText(text: string): { origin: string; size: number; root: string } {
  const lines = text.slice(0, -1).split("\n");
  if (lines.length !== 3) throw bad(`the text has ${lines.length} lines, not origin, size and root`);
  const [origin, size, root] = lines as [string, string, string];
  if (!origin) throw bad("the origin is empty");
  const leaves = treeSize(size);
  if (leaves === undefined) throw bad(`the size ${JSON.stringify(size)} is not a number of leaves`);
  const hash = Buffer.from(root, "base64");
  if (hash.length !== 32 || hash.toString("base64") !== root)
    throw bad("the root is not a base64 SHA-256 hash");
  return { origin, size: leaves, root: hash.toString("base64url") };
}

/**
 * Verifies a checkpoint against the JWS tree head that travels with it: the tree head verifies against the
 * bundle; the checkpoint's origin is its signer's SPIFFE ID, its size and root are the tree head's, and it
 * carries a valid signature under that name by the tree head's signing key. Other signatures (a witness's
 * cosignature) are left to whoever knows their keys. Throws SvcError("receipt").
 */
export async function verifyCheckpoint(
  note: string,
  treeHead: string,
  bundles: BundleSource,
): Promise<{
  origin: string;
  size: number;
  root: string;
  text: string;
  head: VerifiedJws<TreeHeadClaims>;
}> {
  const head = await verifyTreeHead(treeHead, bundles);
  const { text, signatures } = parseNote(note);
  const c = parseText(text);
  const origin = checkpointOrigin(head.issuer.uri);
  if (c.origin !== origin)
    throw bad(`its origin is ${JSON.stringify(c.origin)}, the tree head's signer is ${origin}`);
  if (c.size !== head.claims.size || c.root !== head.claims.root)
    throw bad(
      `it says ${c.size} leaves with root ${c.root}, the tree head ${head.claims.size} with ${head.claims.root}`,
    );
  const key = createPublicKey(derToPem(head.chain[0]?.der as Uint8Array));
  const { type, id } = noteKey(origin, key);
  const mine = signatures.find((s) => s.name === origin && s.id.equals(id));
  if (!mine) throw bad(`no signature by ${origin} with the key of the tree head's certificate`);
  const data = Buffer.from(text);
  const ok =
    type === 0x02
      ? verify("sha256", data, { key, dsaEncoding: "der" }, mine.signature)
      : verify(null, data, key, mine.signature);
  if (!ok) throw bad(`the signature by ${origin} does not verify`);
  return { ...c, text, head };
}
