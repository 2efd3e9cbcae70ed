/**
 * Compact JWS signed with an X.509-SVID key, the SVID chain in `x5c` (docs/notary.md, "Formats"), so that
 * anyone with the trust bundle verifies offline: chain to the bundle (at the time the object was issued),
 * leaf URI SAN equal to `iss`, signature.
 */
import { createPrivateKey, createPublicKey, type KeyObject } from "node:crypto";
import { CompactSign, compactVerify, decodeProtectedHeader } from "jose";
import * as v from "valibot";
import { type ErrorCode, SvcError } from "../errors.ts";
import type { BundleSource } from "../spiffe/bundle.ts";
import { type Cert, derToPem } from "../spiffe/cert.ts";
import type { SpiffeId } from "../spiffe/id.ts";
import { verifyX509Svid, type X509Svid } from "../spiffe/x509svid.ts";

export interface SvidSigner {
  key: KeyObject;
  /** Leaf first. */
  chain: readonly Cert[];
}

/** A signer for an SVID's key and chain. */
export function svidSigner(keyPem: string, chain: readonly Cert[]): SvidSigner {
  return { key: createPrivateKey(keyPem), chain };
}

const signers = new WeakMap<X509Svid, SvidSigner>();

/** The signer of an SVID, made once per SVID (each rotation brings a new one). */
export function signerFor(svid: X509Svid): SvidSigner {
  let s = signers.get(svid);
  if (!s) {
    s = svidSigner(svid.keyPem, svid.chain);
    signers.set(svid, s);
  }
  return s;
}

/**
 * The claims of a compact JWS without checking anything: for what the caller signed or verified itself
 * already (verifyJws checks the rest). Throws on a JWS whose payload is not JSON.
 */
export function unverifiedClaims<T>(jws: string): T {
  return JSON.parse(Buffer.from(jws.trim().split(".")[1] ?? "", "base64url").toString()) as T;
}

function algorithmFor(key: KeyObject): string {
  const d = key.asymmetricKeyDetails;
  switch (key.asymmetricKeyType) {
    case "ec":
      if (d?.namedCurve === "prime256v1" || d?.namedCurve === "P-256") return "ES256";
      if (d?.namedCurve === "secp384r1" || d?.namedCurve === "P-384") return "ES384";
      break;
    case "rsa":
      return "RS256";
    case "rsa-pss":
      return "PS256";
    case "ed25519":
      return "EdDSA";
  }
  throw new SvcError("notary", `cannot sign with a ${key.asymmetricKeyType} ${d?.namedCurve ?? ""} key`);
}

const ALGORITHMS = ["ES256", "ES384", "RS256", "PS256", "EdDSA"];

export async function signJws(claims: object, signer: SvidSigner, typ: string): Promise<string> {
  const key = signer.key;
  return new CompactSign(new TextEncoder().encode(JSON.stringify(claims)))
    .setProtectedHeader({
      alg: algorithmFor(key),
      typ,
      x5c: signer.chain.map((c) => Buffer.from(c.der).toString("base64")),
    })
    .sign(key);
}

export interface VerifiedJws<T> {
  claims: T;
  issuer: SpiffeId;
  chain: readonly Cert[];
}

function fail(code: ErrorCode, what: string, why: string): SvcError {
  return new SvcError(code, `${what} verification failed: ${why}`);
}

/** The last second of the year 9999: an `iat` past it is no date (and would skip the validity checks). */
const MAX_IAT = 253_402_300_799;

/**
 * Each part in the one base64url spelling signJws writes: a JWS whose last character carries other unused
 * bits decodes to the same bytes, but under another content ID.
 */
const canonical = (jws: string) =>
  jws
    .split(".")
    .every(
      (part) =>
        /^[A-Za-z0-9_-]*$/.test(part) && Buffer.from(part, "base64url").toString("base64url") === part,
    );

/**
 * Verifies a JWS made by signJws. `what` names the object in errors ("workload statement"); `code` is
 * the SvcError code thrown. Checks the spelling, typ, the signature with the x5c leaf key, the claims'
 * shape against `schema`, the chain against the bundle at `iat`, `iss` against the leaf's SPIFFE ID, and
 * that `aud` ends with `audienceSuffix`.
 */
export async function verifyJws<T extends { iss: string; iat: number; aud: string | string[] }>(
  jws: string,
  bundles: BundleSource,
  o: {
    typ: string;
    audienceSuffix: string;
    what: string;
    code: ErrorCode;
    schema: v.GenericSchema<unknown, unknown>;
  },
): Promise<VerifiedJws<T>> {
  if (!canonical(jws)) throw fail(o.code, o.what, "not a compact JWS in canonical base64url");
  let header: ReturnType<typeof decodeProtectedHeader>;
  try {
    header = decodeProtectedHeader(jws);
  } catch (e) {
    throw fail(o.code, o.what, `not a compact JWS (${(e as Error).message})`);
  }
  if (header.typ !== o.typ)
    throw fail(o.code, o.what, `typ is ${JSON.stringify(header.typ)}, expected "${o.typ}"`);
  if (!header.alg || !ALGORITHMS.includes(header.alg))
    throw fail(o.code, o.what, `algorithm ${JSON.stringify(header.alg)} is not allowed`);
  const x5c = header.x5c;
  if (!Array.isArray(x5c) || x5c.length === 0) throw fail(o.code, o.what, "no x5c certificate chain");
  const presented = x5c.map((b) => new Uint8Array(Buffer.from(String(b), "base64")));
  let claims: T;
  try {
    const leafKey = createPublicKey(derToPem(presented[0] as Uint8Array));
    const { payload } = await compactVerify(jws, leafKey, { algorithms: ALGORITHMS });
    claims = JSON.parse(new TextDecoder().decode(payload)) as T;
  } catch (e) {
    throw fail(o.code, o.what, `bad signature (${(e as Error).message})`);
  }
  const shape = v.safeParse(o.schema, claims);
  if (!shape.success) {
    const issue = shape.issues[0];
    throw fail(o.code, o.what, `malformed claims: ${v.getDotPath(issue) ?? "(top)"}: ${issue.message}`);
  }
  if (!Number.isSafeInteger(claims.iat) || claims.iat < 0 || claims.iat > MAX_IAT)
    throw fail(o.code, o.what, `iat ${JSON.stringify(claims.iat)} is not a time in whole seconds`);
  let verified: ReturnType<typeof verifyX509Svid>;
  try {
    verified = verifyX509Svid(presented, bundles, new Date(claims.iat * 1000));
  } catch (e) {
    throw fail(o.code, o.what, `signing certificate not trusted: ${(e as Error).message}`);
  }
  if (claims.iss !== verified.id.uri)
    throw fail(o.code, o.what, `iss ${JSON.stringify(claims.iss)} is not the signer ${verified.id.uri}`);
  const aud = Array.isArray(claims.aud) ? claims.aud : [claims.aud];
  if (!aud.some((a) => typeof a === "string" && a.endsWith(o.audienceSuffix)))
    throw fail(o.code, o.what, `aud ${JSON.stringify(claims.aud)} has no URL ending in ${o.audienceSuffix}`);
  return { claims, issuer: verified.id, chain: verified.chain };
}
