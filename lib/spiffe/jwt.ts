/**
 * JWT-SVIDs (spiffe/spiffe standards/JWT-SVID.md): a JWS whose `sub` is the SPIFFE ID, with `aud` and
 * `exp` required, signed with a key from the JWT bundle of the subject's trust domain (selected by
 * `kid`). Only asymmetric algorithms are accepted.
 */
import {
  createLocalJWKSet,
  decodeJwt,
  decodeProtectedHeader,
  type JSONWebKeySet,
  type JWTPayload,
  jwtVerify,
} from "jose";
import { SvcError } from "../errors.ts";
import { parseSpiffeId, parseTrustDomain, type SpiffeId } from "./id.ts";

const JWT_SVID_ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512"];

/**
 * JWT authorities per trust domain. SPIFFE bundles mark keys `use: "jwt-svid"` (and X.509 authorities
 * `x509-svid` in the same document); only JWT keys are kept, with `use` removed so that JOSE key
 * selection (which expects `sig`) considers them.
 */
export class JwtBundleSet {
  private readonly byDomain: Map<string, JSONWebKeySet>;
  constructor(bundles: Iterable<[string, JSONWebKeySet]>) {
    this.byDomain = new Map(
      [...bundles].map(([td, jwks]) => [
        parseTrustDomain(td),
        {
          keys: (jwks.keys ?? []).filter((k) => !k.use || k.use === "jwt-svid").map(({ use: _, ...k }) => k),
        },
      ]),
    );
  }

  /** From the Workload API's map of trust-domain ID to JWKS JSON bytes. */
  static fromWorkloadApi(bundles: Map<string, Uint8Array>): JwtBundleSet {
    const entries: [string, JSONWebKeySet][] = [];
    for (const [td, json] of bundles) {
      try {
        entries.push([td, JSON.parse(new TextDecoder().decode(json)) as JSONWebKeySet]);
      } catch (e) {
        throw new SvcError("workload_api", `the JWT bundle of ${td} is not JSON: ${(e as Error).message}`);
      }
    }
    return new JwtBundleSet(entries);
  }

  get(trustDomain: string): JSONWebKeySet | undefined {
    return this.byDomain.get(trustDomain);
  }
}

export interface ValidatedJwtSvid {
  id: SpiffeId;
  claims: JWTPayload;
}

function invalid(why: string): SvcError {
  return new SvcError("invalid_jwt", `invalid JWT-SVID: ${why}`);
}

export async function validateJwtSvid(
  token: string,
  audience: string,
  bundles: JwtBundleSet,
): Promise<ValidatedJwtSvid> {
  let header: ReturnType<typeof decodeProtectedHeader>;
  let payload: JWTPayload;
  try {
    header = decodeProtectedHeader(token);
    payload = decodeJwt(token);
  } catch (e) {
    throw invalid(`not a JWS (${(e as Error).message})`);
  }
  if (!header.alg || !JWT_SVID_ALGORITHMS.includes(header.alg)) {
    throw invalid(
      `algorithm ${JSON.stringify(header.alg)} is not allowed (allowed: ${JWT_SVID_ALGORITHMS.join(", ")})`,
    );
  }
  if (!payload.sub) throw invalid("the sub claim is missing");
  if (payload.exp === undefined) throw invalid("the exp claim is missing");
  let id: SpiffeId;
  try {
    id = parseSpiffeId(payload.sub);
  } catch (e) {
    throw invalid(`sub is not a SPIFFE ID (${(e as Error).message})`);
  }
  const jwks = bundles.get(id.trustDomain);
  if (!jwks) throw invalid(`no JWT bundle for trust domain "${id.trustDomain}"`);
  try {
    const { payload: claims } = await jwtVerify(token, createLocalJWKSet(jwks), {
      audience,
      algorithms: JWT_SVID_ALGORITHMS,
    });
    return { id, claims };
  } catch (e) {
    throw invalid((e as Error).message);
  }
}
