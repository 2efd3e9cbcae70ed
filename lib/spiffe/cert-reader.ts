// @peculiar/x509 (through tsyringe) needs the reflect-metadata polyfill installed before it is evaluated:
// imported first, here, next to its only user on the svc-proxy path.
import "reflect-metadata";
import { RSAPublicKey, RsaSaPssParams } from "@peculiar/asn1-rsa";
import { AsnParser } from "@peculiar/asn1-schema";
import {
  BasicConstraints,
  Certificate,
  type GeneralName,
  KeyUsage,
  NameConstraints as NameConstraintsAsn,
  SubjectAlternativeName,
} from "@peculiar/asn1-x509";
import * as x509 from "@peculiar/x509";
import type * as asn1js from "asn1js";
import { SvcError } from "../errors.ts";
import {
  type Block,
  childrenOf,
  contentOf,
  DerFault,
  frameElement,
  parseDer,
  schema,
  tagByte,
  UNIVERSAL,
} from "./der-strict.ts";

/**
 * Reads X.509 certificates with the @peculiar stack: asn1js parses, asn1-schema maps the result onto
 * asn1-x509's RFC 5280 types (Certificate, BasicConstraints, KeyUsage, SubjectAlternativeName,
 * NameConstraints) and asn1-rsa's (RSAPublicKey, RSASSA-PSS parameters), and @peculiar/x509 formats names.
 * Those accept BER and some malformed input. Every parse (the certificate, then each extension value svc
 * interprets) goes through der-strict.ts, which holds it to DER (framing and contents, and what asn1-schema
 * read encoding back to the bytes read) and to at most MAX_ELEMENTS ASN.1 elements and MAX_DEPTH levels.
 * The rules here make reading strict and bounded on top of that:
 *
 * - at most MAX_CERT_BYTES bytes, refused before anything parses them: with the limits per parse, the
 *   cost of reading is bounded whatever a peer sends;
 * - a SEQUENCE; no unused bits in the public key's or the signature's BIT STRING;
 * - versions 1 to 3, extensions only in version 3; validity times exactly as RFC 5280 section 4.1.2.5
 *   writes them, on real calendar dates; no extension twice (RFC 5280 section 4.2).
 *
 * Every refusal is a CertReadError, an SvcError("invalid_svid") whose message names the fault in our
 * words (der-strict.ts's DerFault passed on as one): no native (OpenSSL/BoringSSL) error text and no
 * exception text of a library. The differential test (tests/unit/cert-differential.test.ts) holds the
 * result against node:crypto's reader.
 */
/** The largest certificate node:crypto (BoringSSL in Bun) reads too. */
export const MAX_CERT_BYTES = 100 * 1024;

const hex = (n: number) => `0x${n.toString(16).padStart(2, "0")}`;

/** A Name (DER) as one line, RFC 4514 style ("O=SPIFFE, CN=leaf"); "" when it is empty. */
function formatName(der: Uint8Array): string {
  try {
    return new x509.Name(der).toString();
  } catch {
    return "(a name svc cannot print)";
  }
}

export class CertReadError extends SvcError {
  constructor(why: string) {
    super("invalid_svid", `malformed certificate: ${why}`);
  }
}

/** The GeneralName tags of RFC 5280 section 4.2.1.6 as they appear on the wire (implicitly tagged). */
export const GeneralNameTag = {
  otherName: 0xa0,
  rfc822Name: 0x81,
  dNSName: 0x82,
  x400Address: 0xa3,
  directoryName: 0xa4,
  ediPartyName: 0xa5,
  uniformResourceIdentifier: 0x86,
  iPAddress: 0x87,
  registeredID: 0x88,
} as const;

export const ExtensionOid = {
  subjectKeyIdentifier: "2.5.29.14",
  keyUsage: "2.5.29.15",
  subjectAltName: "2.5.29.17",
  basicConstraints: "2.5.29.19",
  nameConstraints: "2.5.29.30",
  authorityKeyIdentifier: "2.5.29.35",
  extKeyUsage: "2.5.29.37",
} as const;

export interface NameConstraint {
  /** The GeneralName tag of the subtree's base (0x82 dNSName, 0x86 URI, …). */
  readonly tag: number;
  /** The name, for dNSName and URI bases; "" for other kinds. */
  readonly value: string;
}
export interface NameConstraints {
  readonly permitted: readonly NameConstraint[];
  readonly excluded: readonly NameConstraint[];
}

/** What the SVID rules need from one certificate. */
export interface CertFacts {
  readonly subject: string;
  readonly issuer: string;
  readonly notBefore: Date;
  readonly notAfter: Date;
  /** undefined when the basicConstraints extension is absent. */
  readonly isCA: boolean | undefined;
  readonly pathLength: number | undefined;
  /** Bit mask of KeyUsage flags (digitalSignature is 1); undefined when the extension is absent. */
  readonly keyUsage: number | undefined;
  readonly uriSans: readonly string[];
  readonly dnsSans: readonly string[];
  /** The GeneralName tags of every other kind of subject alternative name the certificate carries. */
  readonly otherSanTags: readonly number[];
  /** undefined when the nameConstraints extension is absent. */
  readonly nameConstraints: NameConstraints | undefined;
  /** Every extension's OID (dotted) and whether it is marked critical, in order. */
  readonly extensions: readonly { readonly oid: string; readonly critical: boolean }[];
  /** The algorithm of the issuer's signature, and the broken hash it uses, if it does (MD2, MD4, MD5, SHA-1). */
  readonly signature: { readonly oid: string; readonly name: string; readonly weakHash: string | undefined };
  /** The subject's public key: algorithm and, for RSA, the exact size of the modulus in bits. */
  readonly publicKey: { readonly oid: string; readonly name: string; readonly rsaBits: number | undefined };
}

// ---------------------------------------------------------------------------------------------------------
// Times

/** The text of a UTCTime (YYMMDDHHMMSSZ) or GeneralizedTime (YYYYMMDDHHMMSSZ), as RFC 5280 requires them. */
function timeOf(b: Block): Date {
  const tag = b.idBlock.tagClass === UNIVERSAL ? b.idBlock.tagNumber : -1;
  const s = Buffer.from(contentOf(b)).toString("latin1");
  const m = tag === 23 ? /^(\d{2})(\d{10})Z$/.exec(s) : tag === 24 ? /^(\d{4})(\d{10})Z$/.exec(s) : null;
  if (!m) throw new CertReadError(`malformed time ${JSON.stringify(s)}`);
  const y = Number(m[1]);
  const year = tag === 23 ? (y < 50 ? 2000 + y : 1900 + y) : y;
  const r = m[2] as string;
  const d = new Date(0);
  d.setUTCFullYear(year, Number(r.slice(0, 2)) - 1, Number(r.slice(2, 4)));
  d.setUTCHours(Number(r.slice(4, 6)), Number(r.slice(6, 8)), Number(r.slice(8, 10)));
  const back = [d.getUTCMonth() + 1, d.getUTCDate(), d.getUTCHours(), d.getUTCMinutes(), d.getUTCSeconds()];
  if (back.map((n) => String(n).padStart(2, "0")).join("") !== r)
    throw new CertReadError(`impossible time ${JSON.stringify(s)}`);
  return d;
}

/** One DER-encoded UTCTime or GeneralizedTime element. */
export function readTime(der: Uint8Array): Date {
  let b: Block;
  try {
    b = parseDer(der, "time");
  } catch (e) {
    throw e instanceof DerFault ? new CertReadError(e.message) : e;
  }
  return timeOf(b);
}

// ---------------------------------------------------------------------------------------------------------
// Algorithms

const SIGNATURES: Record<string, readonly [name: string, hash: string]> = {
  "1.2.840.113549.1.1.2": ["md2WithRSAEncryption", "MD2"],
  "1.2.840.113549.1.1.3": ["md4WithRSAEncryption", "MD4"],
  "1.2.840.113549.1.1.4": ["md5WithRSAEncryption", "MD5"],
  "1.2.840.113549.1.1.5": ["sha1WithRSAEncryption", "SHA-1"],
  "1.3.14.3.2.29": ["sha1WithRSASignature", "SHA-1"],
  "1.2.840.10045.4.1": ["ecdsa-with-SHA1", "SHA-1"],
  "1.2.840.10040.4.3": ["dsa-with-sha1", "SHA-1"],
  "1.3.14.3.2.27": ["dsaWithSHA1", "SHA-1"],
  "1.2.840.113549.1.1.11": ["sha256WithRSAEncryption", "SHA-256"],
  "1.2.840.113549.1.1.12": ["sha384WithRSAEncryption", "SHA-384"],
  "1.2.840.113549.1.1.13": ["sha512WithRSAEncryption", "SHA-512"],
  "1.2.840.113549.1.1.14": ["sha224WithRSAEncryption", "SHA-224"],
  "1.2.840.10045.4.3.1": ["ecdsa-with-SHA224", "SHA-224"],
  "1.2.840.10045.4.3.2": ["ecdsa-with-SHA256", "SHA-256"],
  "1.2.840.10045.4.3.3": ["ecdsa-with-SHA384", "SHA-384"],
  "1.2.840.10045.4.3.4": ["ecdsa-with-SHA512", "SHA-512"],
  "1.3.101.112": ["Ed25519", "none"],
  "1.3.101.113": ["Ed448", "none"],
};
const RSASSA_PSS = "1.2.840.113549.1.1.10";
const DIGESTS: Record<string, string> = {
  "1.2.840.113549.2.2": "MD2",
  "1.2.840.113549.2.4": "MD4",
  "1.2.840.113549.2.5": "MD5",
  "1.3.14.3.2.26": "SHA-1",
  "2.16.840.1.101.3.4.2.1": "SHA-256",
  "2.16.840.1.101.3.4.2.2": "SHA-384",
  "2.16.840.1.101.3.4.2.3": "SHA-512",
  "2.16.840.1.101.3.4.2.4": "SHA-224",
};
const BROKEN = new Set(["MD2", "MD4", "MD5", "SHA-1"]);

function signatureOf(cert: Certificate): CertFacts["signature"] {
  const alg = cert.signatureAlgorithm;
  const oid = alg.algorithm;
  if (oid === RSASSA_PSS) {
    // RSASSA-PSS names its hash in its parameters; absent, the hash is SHA-1 (RFC 4055 section 3.1).
    let params = new RsaSaPssParams();
    if (alg.parameters) {
      const root = parseDer(new Uint8Array(alg.parameters), "RSASSA-PSS parameters");
      try {
        // Not held to re-encoding (schema()): encoders commonly write these DEFAULT values out.
        params = AsnParser.fromASN(root as unknown as asn1js.AsnType, RsaSaPssParams);
      } catch {
        throw new CertReadError("RSASSA-PSS parameters: not the ASN.1 structure RFC 4055 defines");
      }
    }
    const hash = DIGESTS[params.hashAlgorithm.algorithm] ?? params.hashAlgorithm.algorithm;
    return { oid, name: `RSASSA-PSS with ${hash}`, weakHash: BROKEN.has(hash) ? hash : undefined };
  }
  const known = SIGNATURES[oid];
  const hash = known?.[1];
  return { oid, name: known?.[0] ?? oid, weakHash: hash && BROKEN.has(hash) ? hash : undefined };
}

const KEYS: Record<string, string> = {
  "1.2.840.113549.1.1.1": "RSA",
  [RSASSA_PSS]: "RSA-PSS",
  "1.2.840.10045.2.1": "EC",
  "1.3.101.112": "Ed25519",
  "1.3.101.113": "Ed448",
  "1.2.840.10040.4.1": "DSA",
};

function publicKeyOf(cert: Certificate): CertFacts["publicKey"] {
  const spki = cert.tbsCertificate.subjectPublicKeyInfo;
  const oid = spki.algorithm.algorithm;
  const name = KEYS[oid] ?? oid;
  if (name !== "RSA" && name !== "RSA-PSS") return { oid, name, rsaBits: undefined };
  const key = schema(
    parseDer(new Uint8Array(spki.subjectPublicKey), "RSA public key"),
    RSAPublicKey,
    "RSA public key",
    "RFC 8017",
  );
  const n = new Uint8Array(key.modulus);
  let i = 0;
  while (i < n.length && n[i] === 0) i++;
  const top = n[i];
  const rsaBits = top === undefined ? 0 : (n.length - i - 1) * 8 + (32 - Math.clz32(top));
  return { oid, name, rsaBits };
}

// ---------------------------------------------------------------------------------------------------------
// Extensions

function tagOf(n: GeneralName): number {
  for (const [field, tag] of Object.entries(GeneralNameTag))
    if ((n as Record<string, unknown>)[field] !== undefined) return tag;
  throw new CertReadError("a GeneralName of no known kind");
}

function keyUsageFlags(bits: KeyUsage): number {
  // Bit i of the BIT STRING (from the most significant bit of the first octet) is flag 1 << i.
  const octets = new Uint8Array(bits.value);
  let flags = 0;
  for (let i = 0; i < 9; i++) {
    const octet = octets[i >> 3];
    if (octet !== undefined && octet & (0x80 >> (i & 7))) flags |= 1 << i;
  }
  return flags;
}

function subtrees(list: readonly { base: GeneralName }[] | undefined): NameConstraint[] {
  return (list ?? []).map(({ base }) => {
    const tag = tagOf(base);
    const value =
      tag === GeneralNameTag.dNSName
        ? (base.dNSName as string)
        : tag === GeneralNameTag.uniformResourceIdentifier
          ? (base.uniformResourceIdentifier as string)
          : "";
    return Object.freeze({ tag, value });
  });
}

interface Mutable {
  isCA: boolean | undefined;
  pathLength: number | undefined;
  keyUsage: number | undefined;
  uriSans: string[];
  dnsSans: string[];
  otherSanTags: number[];
  nameConstraints: NameConstraints | undefined;
}

function readExtension(oid: string, value: Uint8Array, x: Mutable): void {
  const what = `extension ${oid}`;
  switch (oid) {
    case ExtensionOid.basicConstraints: {
      const bc = schema(parseDer(value, what), BasicConstraints, what);
      x.isCA = bc.cA;
      const p = bc.pathLenConstraint;
      if (p !== undefined) {
        const n = Number(p);
        if (!Number.isSafeInteger(n) || n < 0 || n > 0x7fffffff)
          throw new CertReadError(`${what}: path length out of range`);
        x.pathLength = n;
      }
      return;
    }
    case ExtensionOid.keyUsage:
      x.keyUsage = keyUsageFlags(schema(parseDer(value, what), KeyUsage, what));
      return;
    case ExtensionOid.subjectAltName:
      for (const name of schema(parseDer(value, what), SubjectAlternativeName, what)) {
        if (name.uniformResourceIdentifier !== undefined) x.uriSans.push(name.uniformResourceIdentifier);
        else if (name.dNSName !== undefined) x.dnsSans.push(name.dNSName);
        else x.otherSanTags.push(tagOf(name));
      }
      return;
    case ExtensionOid.nameConstraints: {
      const nc = schema(parseDer(value, what), NameConstraintsAsn, what);
      x.nameConstraints = Object.freeze({
        permitted: Object.freeze(subtrees(nc.permittedSubtrees)),
        excluded: Object.freeze(subtrees(nc.excludedSubtrees)),
      });
      return;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------

/** Refuses a certificate larger than MAX_CERT_BYTES, before anything reads it. */
export function refuseOversized(der: Uint8Array): void {
  if (der.length > MAX_CERT_BYTES)
    throw new CertReadError(`${der.length} bytes, more than the ${MAX_CERT_BYTES} svc reads`);
}

/**
 * Reads one DER certificate. Throws CertReadError (an SvcError) naming the fault; any other failure of
 * the libraries is reported as such too, never passed on.
 */
export function readCertificate(der: Uint8Array): CertFacts {
  refuseOversized(der);
  try {
    return read(der);
  } catch (e) {
    if (e instanceof SvcError) throw e;
    if (e instanceof DerFault) throw new CertReadError(e.message);
    throw new CertReadError("the X.509 library could not read it");
  }
}

/**
 * The subject's public key and the signature are whole octets (no unused bits) for every algorithm in use,
 * and asn1-schema reads them as octets: refuse, naming it, what it would misread.
 */
function bitStringsWhole(root: Block): void {
  const [tbs, , signature] = childrenOf(root);
  const fields = tbs ? childrenOf(tbs) : [];
  const spki = fields[fields[0] && tagByte(fields[0]) === 0xa0 ? 6 : 5];
  const key = spki ? childrenOf(spki)[1] : undefined;
  for (const [b, what] of [
    [key, "public key"],
    [signature, "signature"],
  ] as const)
    if (b && tagByte(b) === 0x03 && contentOf(b)[0] !== 0)
      throw new CertReadError(`${what} BIT STRING with unused bits`);
}

function read(der: Uint8Array): CertFacts {
  if (der.length === 0) throw new CertReadError("empty");
  const root = parseDer(der, "certificate");
  if (tagByte(root) !== 0x30)
    throw new CertReadError(`expected tag 0x30 (a SEQUENCE), found ${hex(tagByte(root))}`);
  bitStringsWhole(root);
  const asn = schema(root, Certificate, "certificate");
  const tbs = asn.tbsCertificate;
  // RFC 5280 section 4.1.2.1: versions 1 to 3; extensions only in version 3, unique identifiers from 2.
  const version = Number(tbs.version);
  if (version !== 0 && version !== 1 && version !== 2)
    throw new CertReadError(`unknown certificate version ${Number.isFinite(version) ? version + 1 : "?"}`);
  if (tbs.extensions && version !== 2)
    throw new CertReadError(`extensions in a version ${version + 1} certificate`);
  if ((tbs.issuerUniqueID || tbs.subjectUniqueID) && version === 0)
    throw new CertReadError("unique identifiers in a version 1 certificate");

  // Validity from the encoded text: asn1js reads times leniently.
  const fields = childrenOf(childrenOf(root)[0] as Block);
  const rest = fields[0]?.idBlock.tagClass === 3 ? fields.slice(1) : fields;
  const [notBefore, notAfter] = childrenOf(rest[3] as Block).map(timeOf);
  const issuerDer = (rest[2] as Block).valueBeforeDecodeView?.slice() ?? new Uint8Array(0);
  const subjectDer = (rest[4] as Block).valueBeforeDecodeView?.slice() ?? new Uint8Array(0);

  const x: Mutable = {
    isCA: undefined,
    pathLength: undefined,
    keyUsage: undefined,
    uriSans: [],
    dnsSans: [],
    otherSanTags: [],
    nameConstraints: undefined,
  };
  const seen = new Set<string>();
  const extensions: { oid: string; critical: boolean }[] = [];
  for (const ext of tbs.extensions ?? []) {
    const oid = ext.extnID;
    if (seen.has(oid)) throw new CertReadError(`extension ${oid} appears twice`);
    seen.add(oid);
    extensions.push(Object.freeze({ oid, critical: ext.critical === true }));
    readExtension(oid, new Uint8Array(ext.extnValue.buffer), x);
  }
  const facts = {
    notBefore: notBefore as Date,
    notAfter: notAfter as Date,
    isCA: x.isCA,
    pathLength: x.pathLength,
    keyUsage: x.keyUsage,
    uriSans: Object.freeze(x.uriSans),
    dnsSans: Object.freeze(x.dnsSans),
    otherSanTags: Object.freeze(x.otherSanTags),
    nameConstraints: x.nameConstraints,
    extensions: Object.freeze(extensions),
    signature: Object.freeze(signatureOf(asn)),
    publicKey: Object.freeze(publicKeyOf(asn)),
  };
  // Names are formatted when first asked for, then kept: a handshake never needs them, only messages do.
  const lazy = (der: Uint8Array): PropertyDescriptor => {
    let text: string | undefined;
    return {
      enumerable: true,
      get: () => {
        if (text === undefined) text = formatName(der);
        return text;
      },
    };
  };
  return Object.defineProperties(facts, { subject: lazy(subjectDer), issuer: lazy(issuerDer) }) as CertFacts;
}

/**
 * Splits concatenated DER certificates (the Workload API's encoding of chains and bundles), each element
 * framed by asn1js within der-strict.ts's limits. Their contents are read later, one by one.
 */
export function splitCertificates(buf: Uint8Array): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (let i = 0; i < buf.length; ) {
    const rest = buf.subarray(i, Math.min(buf.length, i + MAX_CERT_BYTES + 8));
    let element: ReturnType<typeof frameElement>;
    try {
      element = frameElement(rest);
    } catch {
      throw new CertReadError(`certificate list: certificate at byte ${i} cannot be read`);
    }
    if (element.length === -1 || element.tag !== 0x30)
      throw new CertReadError(
        `certificate list: no whole DER certificate at byte ${i}${element.fault ? ` (${element.fault})` : ""}`,
      );
    out.push(buf.subarray(i, i + element.length));
    i += element.length;
  }
  return out;
}
