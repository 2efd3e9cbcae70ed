/**
 * The workload identity statement (docs/notary.md, "Formats"): a proxy's signed account of the upstream
 * workload it authenticated, with the pod facts it checked in the cluster API.
 */
import * as v from "valibot";
import { SvcError } from "../errors.ts";
import type { BundleSource } from "../spiffe/bundle.ts";
import { contentId } from "./ids.ts";
import { type SvidSigner, signJws, type VerifiedJws, verifyJws } from "./jws.ts";

export const STATEMENT_TYP = "svc-workload-statement+jws";
const STATEMENT_AUDIENCE_SUFFIX = "/workload-statement";

export interface WorkloadFacts {
  trustDomain: string;
  spiffeId: string;
  namespace: string;
  serviceAccount: string;
  podName: string;
  podUid: string;
  /** Container images, init containers first, in pod spec order. */
  images: string[];
  labels: Record<string, string>;
  annotations: Record<string, string>;
  /** Content ID of the upstream's leaf certificate (served at /.svc/certificate/{id}). */
  certificateID: string;
  /** A JWT-SVID of the issuing proxy for the statement's audience (docs/notary.md says why). */
  issuerJwtSvid?: string;
}

export interface StatementClaims {
  iss: string;
  sub: string;
  aud: string;
  iat: number;
  svc: WorkloadFacts;
}

const text = v.string();
/** What a verifier reads of a statement's claims, so that printing and checks never meet another shape. */
const STATEMENT_CLAIMS = v.object({
  iss: text,
  sub: text,
  aud: text,
  iat: v.number(),
  svc: v.object({
    trustDomain: text,
    spiffeId: text,
    namespace: text,
    serviceAccount: text,
    podName: text,
    podUid: text,
    images: v.array(text),
    labels: v.record(text, text),
    annotations: v.record(text, text),
    certificateID: text,
    issuerJwtSvid: v.optional(text),
  }),
});

export interface SignedObject {
  id: string;
  jws: string;
}

/** `origin` is the target the statement is about (`https://host:port`); aud is `<origin>/workload-statement`. */
export async function signStatement(
  issuer: string,
  origin: string,
  facts: WorkloadFacts,
  signer: SvidSigner,
  now = new Date(),
): Promise<SignedObject & { claims: StatementClaims }> {
  const claims: StatementClaims = {
    iss: issuer,
    sub: facts.spiffeId,
    aud: `${origin}${STATEMENT_AUDIENCE_SUFFIX}`,
    iat: Math.floor(now.getTime() / 1000),
    svc: facts,
  };
  const jws = await signJws(claims, signer, STATEMENT_TYP);
  return { id: contentId(jws), jws, claims };
}

/**
 * Verifies a statement; with `expectedId`, also that the statement is the one that ID names.
 * Throws SvcError("statement").
 */
export async function verifyStatement(
  jws: string,
  bundles: BundleSource,
  expectedId?: string,
): Promise<VerifiedJws<StatementClaims> & { id: string }> {
  const id = contentId(jws.trim());
  const what = "workload statement";
  const verified = await verifyJws<StatementClaims>(jws.trim(), bundles, {
    typ: STATEMENT_TYP,
    audienceSuffix: STATEMENT_AUDIENCE_SUFFIX,
    what,
    code: "statement",
    schema: STATEMENT_CLAIMS,
  });
  if (expectedId !== undefined && expectedId !== id)
    throw new SvcError("statement", `${what} verification failed: its ID is ${id}, not ${expectedId}`);
  if (verified.claims.svc.spiffeId !== verified.claims.sub)
    throw new SvcError("statement", `${what} verification failed: svc.spiffeId does not match sub`);
  return { ...verified, id };
}
