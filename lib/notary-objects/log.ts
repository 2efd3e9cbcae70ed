/**
 * The notary log: every record the notary stores (certificate, workload statement, exchange, receipt) is
 * a leaf of one Merkle tree (merkle.ts), and the notary signs tree heads — the tree's size and root —
 * with its X.509-SVID, like its receipts. A receipt's inclusion proof and a signed tree head let anyone
 * with the trust bundle check offline that the receipt is in the log the notary vouches for; a record
 * edited or deleted in the database no longer hashes to its leaf.
 */
import * as v from "valibot";
import { SvcError } from "../errors.ts";
import type { BundleSource } from "../spiffe/bundle.ts";
import { B64U_SHA256 } from "./ids.ts";
import { type SvidSigner, signJws, unverifiedClaims, type VerifiedJws, verifyJws } from "./jws.ts";
import { EMPTY_ROOT, type Hash, leafHash, verifyConsistency, verifyInclusion } from "./merkle.ts";

export type LeafKind = "certificate" | "statement" | "exchange" | "receipt";

/** A leaf's bytes: its kind, a zero byte, then the record (a JWS's text, a certificate's DER, …). */
export function leafData(kind: LeafKind, record: Uint8Array | string): Uint8Array {
  const body = typeof record === "string" ? new TextEncoder().encode(record) : record;
  const out = new Uint8Array(kind.length + 1 + body.length);
  out.set(new TextEncoder().encode(kind));
  out.set(body, kind.length + 1);
  return out;
}

const TREE_HEAD_TYP = "svc-tree-head+jws";
const TREE_HEAD_AUDIENCE_SUFFIX = "/log";

export interface TreeHeadClaims {
  iss: string;
  aud: string[];
  iat: number;
  /** Leaves in the tree. */
  size: number;
  /** The tree's root, base64url. */
  root: string;
}

const TREE_HEAD_CLAIMS = v.object({
  iss: v.string(),
  aud: v.array(v.string()),
  iat: v.number(),
  size: v.number(),
  root: v.string(),
});

export const b64u = (h: Uint8Array) => Buffer.from(h).toString("base64url");

function fromB64u(s: unknown, what: string, proof = "inclusion proof"): Hash {
  if (typeof s !== "string" || !B64U_SHA256.test(s))
    throw new SvcError("receipt", `${proof} verification failed: ${what} is not a base64url SHA-256 hash`);
  return new Uint8Array(Buffer.from(s, "base64url"));
}

export async function signTreeHead(
  issuer: string,
  origin: string,
  size: number,
  root: Hash,
  signer: SvidSigner,
  now = new Date(),
): Promise<string> {
  const claims: TreeHeadClaims = {
    iss: issuer,
    aud: [`${origin}${TREE_HEAD_AUDIENCE_SUFFIX}`],
    iat: Math.floor(now.getTime() / 1000),
    size,
    root: b64u(root),
  };
  return signJws(claims, signer, TREE_HEAD_TYP);
}

export async function verifyTreeHead(
  jws: string,
  bundles: BundleSource,
): Promise<VerifiedJws<TreeHeadClaims>> {
  const head = await verifyJws<TreeHeadClaims>(jws.trim(), bundles, {
    typ: TREE_HEAD_TYP,
    audienceSuffix: TREE_HEAD_AUDIENCE_SUFFIX,
    what: "tree head",
    code: "receipt",
    schema: TREE_HEAD_CLAIMS,
  });
  if (!Number.isSafeInteger(head.claims.size) || head.claims.size < 1)
    throw new SvcError(
      "receipt",
      `tree head verification failed: size ${JSON.stringify(head.claims.size)} is not a positive integer`,
    );
  fromB64u(head.claims.root, "the tree head's root");
  return head;
}

function receiptIssuer(jws: string): string {
  try {
    const iss = unverifiedClaims<{ iss?: unknown }>(jws).iss;
    if (typeof iss === "string") return iss;
  } catch {}
  throw new SvcError("receipt", "inclusion proof verification failed: the receipt names no issuer (iss)");
}

/** What `GET /.svc/receipt/{id}/proof` answers, and what `svc notary verify --proof` reads. */
export interface InclusionProof {
  receiptId: string;
  leafIndex: number;
  treeSize: number;
  /** Sibling hashes from the leaf up, base64url. */
  path: string[];
  /** A signed tree head of treeSize leaves. */
  treeHead: string;
  /** Witnesses' cosignatures of the tree head (asked for with `?witnessed=N`). */
  cosignatures?: string[];
}

/**
 * Checks that `receiptJws` is leaf `leafIndex` of the tree a trusted tree head describes. Throws
 * SvcError("receipt") naming what does not hold. The receipt's own signature is checked separately.
 */
export async function verifyReceiptInclusion(
  receiptJws: string,
  proof: InclusionProof,
  bundles: BundleSource,
): Promise<VerifiedJws<TreeHeadClaims>> {
  const bad = (why: string) => new SvcError("receipt", `inclusion proof verification failed: ${why}`);
  if (!proof || typeof proof !== "object") throw bad("the proof is not a JSON object");
  if (!Array.isArray(proof.path)) throw bad("path is not a list of hashes");
  if (typeof proof.treeHead !== "string") throw bad("treeHead is missing");
  const head = await verifyTreeHead(proof.treeHead, bundles);
  // Any workload of the trust domain can sign a tree head; only the receipt's own issuer vouches for
  // the log it is in (a notary's replicas share one SPIFFE ID).
  const issuer = receiptIssuer(receiptJws);
  if (head.issuer.uri !== issuer)
    throw bad(`the tree head is signed by ${head.issuer.uri}, not by the receipt's issuer ${issuer}`);
  if (proof.treeSize !== head.claims.size)
    throw bad(
      `the proof is for a tree of ${proof.treeSize} leaves, the signed tree head has ${head.claims.size}`,
    );
  if (!Number.isSafeInteger(proof.leafIndex) || proof.leafIndex < 0 || proof.leafIndex >= head.claims.size)
    throw bad(`leaf index ${JSON.stringify(proof.leafIndex)} is not in a tree of ${head.claims.size} leaves`);
  const path = proof.path.map((p, i) => fromB64u(p, `path[${i}]`));
  const leaf = leafHash(leafData("receipt", receiptJws.trim()));
  if (!verifyInclusion(leaf, proof.leafIndex, head.claims.size, path, fromB64u(head.claims.root, "root")))
    throw bad(
      `the receipt is not leaf ${proof.leafIndex} of the tree of ${head.claims.size} leaves the tree head signs (the log or the receipt was changed)`,
    );
  return head;
}

/** What `GET /.svc/log/consistency?from=N&to=M` answers, and what `svc notary verify --consistency` reads. */
export interface ConsistencyProof {
  fromSize: number;
  toSize: number;
  /** RFC 9162 2.1.4 consistency path, base64url. */
  path: string[];
  /** Signed tree heads of the two sizes (none for 0 leaves). */
  from?: string;
  to: string;
}

/**
 * Checks that the log the `from` tree head signs is the first part of the one the `to` tree head signs,
 * both signed by one notary. Throws SvcError("receipt") naming what does not hold: a log that was cut
 * and grown again, or two logs under one name, fails here.
 */
export async function verifyConsistencyProof(
  proof: ConsistencyProof,
  bundles: BundleSource,
): Promise<{ from?: VerifiedJws<TreeHeadClaims>; to: VerifiedJws<TreeHeadClaims> }> {
  const bad = (why: string) => new SvcError("receipt", `consistency proof verification failed: ${why}`);
  if (!proof || typeof proof !== "object") throw bad("the proof is not a JSON object");
  const { fromSize, toSize } = proof;
  if (!Number.isSafeInteger(fromSize) || !Number.isSafeInteger(toSize) || fromSize < 0 || fromSize > toSize)
    throw bad(
      `fromSize ${JSON.stringify(fromSize)} and toSize ${JSON.stringify(toSize)} are not sizes with fromSize ≤ toSize`,
    );
  if (!Array.isArray(proof.path)) throw bad("path is not a list of hashes");
  if (typeof proof.to !== "string") throw bad("the tree head `to` is missing");
  if (fromSize > 0 && typeof proof.from !== "string") throw bad("the tree head `from` is missing");
  const to = await verifyTreeHead(proof.to, bundles);
  if (to.claims.size !== toSize)
    throw bad(`the tree head \`to\` has ${to.claims.size} leaves, not ${toSize}`);
  let from: VerifiedJws<TreeHeadClaims> | undefined;
  if (fromSize > 0) {
    from = await verifyTreeHead(proof.from as string, bundles);
    if (from.claims.size !== fromSize)
      throw bad(`the tree head \`from\` has ${from.claims.size} leaves, not ${fromSize}`);
    if (from.issuer.uri !== to.issuer.uri)
      throw bad(`the tree heads are signed by ${from.issuer.uri} and ${to.issuer.uri}, not by one notary`);
  }
  const path = proof.path.map((p, i) => fromB64u(p, `path[${i}]`, "consistency proof"));
  const fromRoot = from ? fromB64u(from.claims.root, "the root of `from`", "consistency proof") : EMPTY_ROOT;
  const toRoot = fromB64u(to.claims.root, "the root of `to`", "consistency proof");
  if (!verifyConsistency(fromSize, toSize, path, fromRoot, toRoot))
    throw bad(
      `the log of ${fromSize} leaves is not the first part of the log of ${toSize} leaves the tree heads sign (a cut or forked log, or a changed proof)`,
    );
  return { ...(from ? { from } : {}), to };
}
