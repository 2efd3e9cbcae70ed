import { createHash, X509Certificate as NativeCert } from "node:crypto";
import { SvcError } from "../errors.ts";
import {
  type CertFacts,
  CertReadError,
  ExtensionOid,
  GeneralNameTag,
  readCertificate,
  refuseOversized,
  splitCertificates,
} from "./cert-reader.ts";

export type { NameConstraint } from "./cert-reader.ts";

/**
 * One parsed certificate: the facts SVID rules need, read by @peculiar/x509 and its ASN.1 stack
 * (cert-reader.ts), and a native handle for signature checks. Cert objects are frozen and shared: the
 * same bytes give the same object while it is remembered (see parseCert).
 */
export interface Cert extends CertFacts {
  readonly der: Uint8Array;
  readonly native: NativeCert;
}

/** GeneralName tags (RFC 5280 section 4.2.1.6), implicitly tagged. */
export const DNS_NAME = GeneralNameTag.dNSName;
export const URI_NAME = GeneralNameTag.uniformResourceIdentifier;

/** RFC 5280 section 4.2.1.3 bits, as flags (bit 0, digitalSignature, is 1). */
export const KeyUsage = {
  digitalSignature: 1,
  nonRepudiation: 2,
  keyEncipherment: 4,
  dataEncipherment: 8,
  keyAgreement: 16,
  keyCertSign: 32,
  cRLSign: 64,
  encipherOnly: 128,
  decipherOnly: 256,
} as const;

export const OID = ExtensionOid;

/**
 * Parse results remembered by the certificate's SHA-256, the least recently used dropped first: a peer
 * that connects again with the same certificates, and authorities that come back in every bundle update,
 * cost one hash instead of a parse (about 1 ms for an SVID, docs/identity.md). Refusals are remembered
 * too (their code and message), so a peer cannot make us parse the same bad certificate twice. Bounded by
 * entries and by the bytes of the certificates kept; a result does not depend on the time, so it never
 * goes stale (validity is checked on every use).
 */
const CACHE_ENTRIES = 256;
const CACHE_BYTES = 4 * 1024 * 1024;
type Remembered =
  | { cert: Cert; bytes: number }
  | { error: { code: SvcError["code"]; message: string }; bytes: 0 };
const remembered = new Map<string, Remembered>();
let rememberedBytes = 0;

function remember(key: string, entry: Remembered): void {
  const old = remembered.get(key);
  if (old) {
    remembered.delete(key);
    rememberedBytes -= old.bytes;
  }
  remembered.set(key, entry);
  rememberedBytes += entry.bytes;
  for (const [k, old] of remembered) {
    if (remembered.size <= CACHE_ENTRIES && rememberedBytes <= CACHE_BYTES) break;
    remembered.delete(k);
    rememberedBytes -= old.bytes;
  }
}

/** How many parse results are remembered (tests). */
export function parseCacheSize(): number {
  return remembered.size;
}

/**
 * Parses one DER certificate, or returns the remembered result for the same bytes. Throws an SvcError
 * ("invalid_svid") naming the fault.
 */
export function parseCert(der: Uint8Array): Cert {
  refuseOversized(der); // before hashing
  const key = createHash("sha256").update(der).digest("base64");
  const hit = remembered.get(key);
  if (hit) {
    remembered.delete(key);
    remembered.set(key, hit);
    if ("error" in hit) throw new SvcError(hit.error.code, hit.error.message);
    if (Buffer.compare(hit.cert.der, der) === 0) return hit.cert;
  }
  let cert: Cert;
  try {
    cert = build(der);
  } catch (e) {
    const error = e instanceof SvcError ? e : new CertReadError("the X.509 library could not read it");
    remember(key, { error: { code: error.code, message: error.message }, bytes: 0 });
    throw error;
  }
  remember(key, { cert, bytes: cert.der.length });
  return cert;
}

function build(input: Uint8Array): Cert {
  const der = new Uint8Array(input); // our own copy: the cached object must not change under us
  const facts = readCertificate(der);
  let native: NativeCert;
  try {
    native = new NativeCert(Buffer.from(der.buffer, der.byteOffset, der.byteLength));
  } catch {
    // What the library read, node:crypto (BoringSSL) must read too: signatures are checked there.
    throw new CertReadError("node:crypto cannot read it");
  }
  // Not a spread: the names are getters that format on first use.
  return Object.freeze(
    Object.defineProperties(facts, {
      der: { value: der, enumerable: true },
      native: { value: native, enumerable: true },
    }) as Cert,
  );
}

/** True when `child` names `parent` as issuer and `parent`'s key verifies `child`'s signature. */
export function isSignedBy(child: Cert, parent: Cert): boolean {
  try {
    return child.native.checkIssued(parent.native) && child.native.verify(parent.native.publicKey);
  } catch {
    return false; // a key node:crypto cannot use verifies nothing
  }
}

/** Splits concatenated DER certificates (the Workload API's encoding of chains and bundles). */
export function splitDer(buf: Uint8Array): Uint8Array[] {
  return splitCertificates(buf);
}

export function derToPem(der: Uint8Array, label = "CERTIFICATE"): string {
  const b64 = Buffer.from(der).toString("base64");
  return `-----BEGIN ${label}-----\n${b64.replace(/.{1,64}/g, "$&\n")}-----END ${label}-----\n`;
}

export function pemToDer(pem: string, label = "CERTIFICATE"): Uint8Array[] {
  const re = new RegExp(`-----BEGIN ${label}-----([\\s\\S]*?)-----END ${label}-----`, "g");
  return [...pem.matchAll(re)].map(
    (m) => new Uint8Array(Buffer.from((m[1] ?? "").replace(/\s+/g, ""), "base64")),
  );
}
