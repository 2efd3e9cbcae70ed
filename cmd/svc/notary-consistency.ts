import { SvcError } from "../../lib/errors.ts";
import type { VerifiedJws } from "../../lib/notary-objects/jws.ts";
import {
  type ConsistencyProof,
  type TreeHeadClaims,
  verifyConsistencyProof,
  verifyTreeHead,
} from "../../lib/notary-objects/log.ts";
import type { BundleSource } from "../../lib/spiffe/bundle.ts";
import { say } from "../say.ts";

/**
 * `svc notary verify --consistency`: a consistency proof as notary-query serves it, checked offline
 * (docs/notary.md, "Consistency proofs") against `kept`, a tree head the user held on to, which the proof
 * must start at: without one, a proof says only that two tree heads some workload signed agree. Failures
 * are SvcError("receipt") (exit 3).
 */
export async function checkConsistency(
  text: string,
  kept: string,
  bundles: BundleSource,
  json: boolean,
): Promise<void> {
  let proof: ConsistencyProof;
  try {
    proof = JSON.parse(text);
  } catch (e) {
    throw new SvcError("usage", `--consistency: not JSON (${(e as Error).message})`);
  }
  const heads = await verifyConsistencyProof(proof, bundles);
  const held = await keptHead(kept, bundles);
  if (held.issuer.uri !== heads.to.issuer.uri)
    throw new SvcError(
      "receipt",
      `consistency proof verification failed: the tree head you kept is signed by ${held.issuer.uri}, the proof's by ${heads.to.issuer.uri}`,
    );
  // The proof must start at the kept head: one that ends there says nothing of the log after it.
  if (!heads.from || held.claims.size !== proof.fromSize)
    throw new SvcError(
      "usage",
      `--tree-head: it is of ${held.claims.size} leaves, the proof starts at ${proof.fromSize}: ask for /.svc/log/consistency?from=${held.claims.size}`,
    );
  if (heads.from.claims.root !== held.claims.root)
    throw new SvcError(
      "receipt",
      `consistency proof verification failed: the log of ${held.claims.size} leaves has root ${heads.from.claims.root} now, but the tree head you kept says ${held.claims.root} (the log was forked or rewritten)`,
    );
  const at = (h: VerifiedJws<TreeHeadClaims>) => new Date(h.claims.iat * 1000).toISOString();
  if (json) {
    process.stdout.write(
      `${JSON.stringify(
        {
          fromSize: proof.fromSize,
          toSize: proof.toSize,
          signedBy: heads.to.issuer.uri,
          ...(heads.from ? { fromRoot: heads.from.claims.root, fromSignedAt: at(heads.from) } : {}),
          toRoot: heads.to.claims.root,
          toSignedAt: at(heads.to),
          keptTreeHead: { size: held.claims.size, root: held.claims.root },
        },
        null,
        2,
      )}\n`,
    );
    return;
  }
  process.stdout.write(
    `The log of ${proof.fromSize} leaves (root ${heads.from.claims.root}) is the first part of the log of ${proof.toSize} leaves (root ${heads.to.claims.root}, tree head signed at ${at(heads.to)}), tree heads signed by ${heads.to.issuer.uri}\n`,
  );
  say(
    "svc notary verify",
    "success",
    `consistency proof verified: the log still extends the tree head of ${held.claims.size} leaves you kept`,
  );
}

/** A tree head the user kept: its JWS, or the JSON of an inclusion proof (treeHead) or a consistency proof (to). */
async function keptHead(text: string, bundles: BundleSource): Promise<VerifiedJws<TreeHeadClaims>> {
  const t = text.trim();
  let jws: unknown = t;
  if (t.startsWith("{")) {
    try {
      const doc = JSON.parse(t);
      jws = doc.treeHead ?? doc.to;
    } catch (e) {
      throw new SvcError("usage", `--tree-head: not JSON (${(e as Error).message})`);
    }
  }
  if (typeof jws !== "string")
    throw new SvcError(
      "usage",
      "--tree-head: no tree head in it (a JWS, or the JSON of an inclusion proof or a consistency proof)",
    );
  return verifyTreeHead(jws, bundles);
}
