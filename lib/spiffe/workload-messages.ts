/**
 * The SPIFFE Workload API messages, encoded and decoded by the code @bufbuild/protobuf generates from
 * proto/spiffe/workload/workload.proto (`make proto`, into lib/spiffe/gen/). The schema has no package,
 * so methods are `/SpiffeWorkloadAPI/<Rpc>`. Byte fields hold ASN.1 DER; map keys are trust-domain
 * SPIFFE IDs. The rest of the code sees the plain shapes below (maps as Map), never generated messages.
 *
 * Decoding checks the bytes first (wire-check.ts), so a message a server should not have sent is an
 * SvcError `workload_api` naming the fault, never a misread message or a library's error text.
 */
import { create, fromBinary, type Message, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import type { GenMessage } from "@bufbuild/protobuf/codegenv2";
import { SvcError } from "../errors.ts";
import {
  JWTBundlesResponseSchema,
  JWTSVIDRequestSchema,
  JWTSVIDResponseSchema,
  SpiffeWorkloadAPI,
  ValidateJWTSVIDRequestSchema,
  ValidateJWTSVIDResponseSchema,
  X509BundlesResponseSchema,
  X509SVIDResponseSchema,
} from "./gen/spiffe/workload/workload_pb.ts";
import { checkWire } from "./wire-check.ts";

export const SERVICE = SpiffeWorkloadAPI.typeName;

export interface X509SvidMessage {
  spiffeId: string;
  x509Svid: Uint8Array;
  x509SvidKey: Uint8Array;
  bundle: Uint8Array;
  hint: string;
}
export interface X509SvidResponse {
  svids: X509SvidMessage[];
  crl: Uint8Array[];
  federatedBundles: Map<string, Uint8Array>;
}
export interface X509BundlesResponse {
  crl: Uint8Array[];
  bundles: Map<string, Uint8Array>;
}
export interface JwtSvidRequest {
  audience: string[];
  spiffeId: string;
}
export interface JwtSvidMessage {
  spiffeId: string;
  svid: string;
  hint: string;
}
export interface JwtSvidResponse {
  svids: JwtSvidMessage[];
}
export interface JwtBundlesResponse {
  bundles: Map<string, Uint8Array>;
}
export interface ValidateJwtSvidRequest {
  audience: string;
  svid: string;
}
export type JsonValue = null | number | string | boolean | JsonValue[] | { [key: string]: JsonValue };
export interface ValidateJwtSvidResponse {
  spiffeId: string;
  claims: Record<string, JsonValue>;
}

function decode<T extends Message>(schema: GenMessage<T>, buf: Uint8Array): T {
  checkWire(schema, buf);
  try {
    return fromBinary(schema, buf, { readUnknownFields: false });
  } catch {
    // Not expected once checkWire passed; the library's text is not ours to show.
    throw new SvcError("workload_api", `not a valid ${schema.typeName} message`);
  }
}

const encode = <T extends Message>(schema: GenMessage<T>, init: MessageInitShape<GenMessage<T>>) =>
  toBinary(schema, create(schema, init));

// Map fields are records with own properties (a key may be `__proto__`); Object.entries and
// Object.fromEntries keep it that way.
const toMap = (record: { [key: string]: Uint8Array }) => new Map(Object.entries(record));

/** The requests without parameters (X509SVIDRequest, X509BundlesRequest, JWTBundlesRequest). */
export const empty = {
  encode: (): Uint8Array => new Uint8Array(),
  decode: (_: Uint8Array): Record<string, never> => ({}),
};

export const x509SvidResponse = {
  encode: (r: X509SvidResponse): Uint8Array =>
    encode(X509SVIDResponseSchema, {
      svids: r.svids.map(({ spiffeId, x509Svid, x509SvidKey, bundle, hint }) => ({
        spiffeId,
        x509Svid,
        x509SvidKey,
        bundle,
        hint,
      })),
      crl: r.crl,
      federatedBundles: Object.fromEntries(r.federatedBundles),
    }),
  decode(buf: Uint8Array): X509SvidResponse {
    const m = decode(X509SVIDResponseSchema, buf);
    return {
      svids: m.svids.map(({ spiffeId, x509Svid, x509SvidKey, bundle, hint }) => ({
        spiffeId,
        x509Svid,
        x509SvidKey,
        bundle,
        hint,
      })),
      crl: m.crl,
      federatedBundles: toMap(m.federatedBundles),
    };
  },
};

export const x509BundlesResponse = {
  encode: (r: X509BundlesResponse): Uint8Array =>
    encode(X509BundlesResponseSchema, { crl: r.crl, bundles: Object.fromEntries(r.bundles) }),
  decode(buf: Uint8Array): X509BundlesResponse {
    const m = decode(X509BundlesResponseSchema, buf);
    return { crl: m.crl, bundles: toMap(m.bundles) };
  },
};

export const jwtSvidRequest = {
  encode: (r: JwtSvidRequest): Uint8Array =>
    encode(JWTSVIDRequestSchema, { audience: r.audience, spiffeId: r.spiffeId }),
  decode(buf: Uint8Array): JwtSvidRequest {
    const m = decode(JWTSVIDRequestSchema, buf);
    return { audience: m.audience, spiffeId: m.spiffeId };
  },
};

export const jwtSvidResponse = {
  encode: (r: JwtSvidResponse): Uint8Array =>
    encode(JWTSVIDResponseSchema, {
      svids: r.svids.map(({ spiffeId, svid, hint }) => ({ spiffeId, svid, hint })),
    }),
  decode(buf: Uint8Array): JwtSvidResponse {
    const m = decode(JWTSVIDResponseSchema, buf);
    return { svids: m.svids.map(({ spiffeId, svid, hint }) => ({ spiffeId, svid, hint })) };
  },
};

export const jwtBundlesResponse = {
  encode: (r: JwtBundlesResponse): Uint8Array =>
    encode(JWTBundlesResponseSchema, { bundles: Object.fromEntries(r.bundles) }),
  decode: (buf: Uint8Array): JwtBundlesResponse => ({
    bundles: toMap(decode(JWTBundlesResponseSchema, buf).bundles),
  }),
};

export const validateJwtSvidRequest = {
  encode: (r: ValidateJwtSvidRequest): Uint8Array =>
    encode(ValidateJWTSVIDRequestSchema, { audience: r.audience, svid: r.svid }),
  decode(buf: Uint8Array): ValidateJwtSvidRequest {
    const m = decode(ValidateJWTSVIDRequestSchema, buf);
    return { audience: m.audience, svid: m.svid };
  },
};

/** The claims are a google.protobuf.Struct, which the generated code holds as a JSON object. */
export const validateJwtSvidResponse = {
  encode: (r: ValidateJwtSvidResponse): Uint8Array =>
    encode(ValidateJWTSVIDResponseSchema, { spiffeId: r.spiffeId, claims: r.claims }),
  decode(buf: Uint8Array): ValidateJwtSvidResponse {
    const m = decode(ValidateJWTSVIDResponseSchema, buf);
    return { spiffeId: m.spiffeId, claims: m.claims ?? {} };
  },
};
