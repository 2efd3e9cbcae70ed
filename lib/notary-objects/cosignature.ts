/**
 * A witness's cosignature of a notary log's tree head (docs/notary.md, "Witnesses"): a JWS of `typ`
 * `svc-cosignature+jws`, signed with the witness's X.509-SVID (chain in `x5c`, as every notary object),
 * saying that the witness saw the log of `aud` at `size` leaves with `root` and that it was consistent
 * with every earlier tree head the witness had seen of that log. The witness policy of `svc curl` and
 * `svc notary verify` counts these.
 */
import * as v from "valibot";
import { SvcError } from "../errors.ts";
import type { BundleSource } from "../spiffe/bundle.ts";
import { B64U_SHA256 } from "./ids.ts";
import { type SvidSigner, signJws, type VerifiedJws, verifyJws } from "./jws.ts";
import { b64u, type TreeHeadClaims } from "./log.ts";
import type { Hash } from "./merkle.ts";

const COSIGNATURE_TYP = "svc-cosignature+jws";
/** A cosignature's audience is the log it is about: the notary's SPIFFE ID and this suffix. */
const LOG_SUFFIX = "/log";

interface CosignatureClaims {
  /** The witness. */
  iss: string;
  /** `<the notary's SPIFFE ID>/log`. */
  aud: string[];
  iat: number;
  size: number;
  root: string;
}

const CLAIMS = v.object({
  iss: v.string(),
  aud: v.pipe(v.array(v.string()), v.length(1, "names exactly one log")),
  iat: v.number(),
  size: v.pipe(v.number(), v.safeInteger(), v.minValue(1)),
  root: v.pipe(v.string(), v.regex(B64U_SHA256, "is not a base64url SHA-256 hash")),
});

/** How far a witness's clock and a notary's may differ, either way. */
export const CLOCK_SKEW_S = 300;

/** At most this many cosignatures are read with one tree head. */
export const MAX_COSIGNATURES = 32;

export function signCosignature(
  witness: string,
  log: string,
  size: number,
  root: Hash,
  signer: SvidSigner,
  now = new Date(),
): Promise<string> {
  const claims: CosignatureClaims = {
    iss: witness,
    aud: [`${log}${LOG_SUFFIX}`],
    iat: Math.floor(now.getTime() / 1000),
    size,
    root: b64u(root),
  };
  return signJws(claims, signer, COSIGNATURE_TYP);
}

/** A verified cosignature: signature, chain to the bundle, `iss` the signer. `log` is the notary named. */
export async function verifyCosignature(
  jws: string,
  bundles: BundleSource,
): Promise<VerifiedJws<CosignatureClaims> & { log: string }> {
  const c = await verifyJws<CosignatureClaims>(jws, bundles, {
    typ: COSIGNATURE_TYP,
    audienceSuffix: LOG_SUFFIX,
    what: "cosignature",
    code: "receipt",
    schema: CLAIMS,
  });
  return { ...c, log: (c.claims.aud[0] as string).slice(0, -LOG_SUFFIX.length) };
}

/** Which witnesses must have cosigned a tree head, and how many of them at least. */
export interface WitnessPolicy {
  witnesses: string[];
  threshold: number;
}

/**
 * Checks that at least `policy.threshold` of `policy.witnesses` cosigned the tree head `head` (its signer,
 * size and root). Cosignatures of other witnesses, other logs or other heads do not count; one that does
 * not verify is named in the error. Returns the witnesses that cosigned. Throws SvcError("receipt").
 */
export async function checkWitnessed(
  head: VerifiedJws<TreeHeadClaims>,
  cosignatures: unknown,
  policy: WitnessPolicy,
  bundles: BundleSource,
): Promise<string[]> {
  const list = cosignatures === undefined ? [] : cosignatures;
  const fail = (why: string) =>
    new SvcError(
      "receipt",
      `witness check failed: the tree head of ${head.claims.size} leaves ${why} (the policy needs ${policy.threshold} of ${policy.witnesses.join(", ")})`,
    );
  if (!Array.isArray(list) || list.some((c) => typeof c !== "string"))
    throw fail("comes with cosignatures that are not a list of JWS strings");
  if (list.length > MAX_COSIGNATURES) throw fail(`comes with more than ${MAX_COSIGNATURES} cosignatures`);
  const cosigned = new Set<string>();
  const notes: string[] = [];
  for (const jws of list as string[]) {
    let c: Awaited<ReturnType<typeof verifyCosignature>>;
    try {
      c = await verifyCosignature(jws, bundles);
    } catch (e) {
      notes.push((e as Error).message);
      continue;
    }
    const by = c.issuer.uri;
    if (!policy.witnesses.includes(by)) continue;
    if (by === head.issuer.uri)
      notes.push(`${by} signed the tree head: a notary is no witness of its own log`);
    else if (c.log !== head.issuer.uri)
      notes.push(`${by} cosigned the log of ${c.log}, not ${head.issuer.uri}`);
    else if (c.claims.size !== head.claims.size || c.claims.root !== head.claims.root)
      notes.push(`${by} cosigned ${c.claims.size} leaves with root ${c.claims.root}, not this tree head`);
    // A cosignature comes after the head it cosigns: one dated before it could be made with a key long
    // expired (a chain is checked at the signature's own iat).
    else if (c.claims.iat + CLOCK_SKEW_S < head.claims.iat)
      notes.push(`${by}'s cosignature is dated ${c.claims.iat}, before the tree head (${head.claims.iat})`);
    else cosigned.add(by);
  }
  if (cosigned.size < policy.threshold)
    throw fail(
      `is cosigned by ${cosigned.size === 0 ? "none" : [...cosigned].join(", ")} of the witnesses${notes.length ? `; ${notes.join("; ")}` : ""}`,
    );
  return [...cosigned];
}
