// @peculiar/x509 (through tsyringe) needs the reflect-metadata polyfill installed before it is evaluated:
// imported first, here, next to its only user on the svc-proxy path.
import "reflect-metadata";
import { RSAPublicKey, RsaSaPssParams } from "@peculiar/asn1-rsa";
import { AsnConvert, AsnParser } from "@peculiar/asn1-schema";
import {
  BasicConstraints,
  Certificate,
  type GeneralName,
  KeyUsage,
  NameConstraints as NameConstraintsAsn,
  SubjectAlternativeName,
} from "@peculiar/asn1-x509";
import * as x509 from "@peculiar/x509";
import * as asn1js from "asn1js";
import { SvcError } from "../errors.ts";

/**
 * Reads X.509 certificates with the @peculiar stack: asn1js parses, asn1-schema maps the result onto
 * asn1-x509's RFC 5280 types (Certificate, BasicConstraints, KeyUsage, SubjectAlternativeName,
 * NameConstraints) and asn1-rsa's (RSAPublicKey, RSASSA-PSS parameters), and @peculiar/x509 formats names.
 * Those accept BER and some malformed input; the rules here make reading strict DER, and bounded:
 *
 * - at most MAX_CERT_BYTES bytes (refused before anything parses them), and per parse (the certificate,
 *   then each extension value svc interprets) at most MAX_ELEMENTS ASN.1 elements and MAX_DEPTH levels:
 *   asn1js stops counting there, so the cost of reading is bounded whatever a peer sends;
 * - DER framing: definite lengths in their shortest form and within the element that contains them
 *   (asn1js lets an element run past its container), single-byte tags, no end-of-contents octets,
 *   primitive and constructed encodings as the universal types require, nothing after the certificate;
 * - DER contents: BOOLEAN as 0x00 or 0xff, minimal INTEGERs and OBJECT IDENTIFIERs, BIT STRING padding of
 *   at most 7 zero bits, UTF8String in UTF-8, BMPString and UniversalString of whole characters; no unused
 *   bits in the public key's or the signature's BIT STRING;
 * - what asn1-schema read must encode back to exactly the bytes read (it does not check every tag nor
 *   refuse every extra element), but for DEFAULT values written out, which Go and BoringSSL accept;
 * - versions 1 to 3, extensions only in version 3; validity times exactly as RFC 5280 section 4.1.2.5
 *   writes them, on real calendar dates; no extension twice (RFC 5280 section 4.2).
 *
 * Every refusal is a CertReadError, an SvcError("invalid_svid") whose message names the fault in our
 * words: no native (OpenSSL/BoringSSL) error text and no exception text of a library. The differential
 * test (tests/unit/cert-differential.test.ts) holds the result against node:crypto's reader.
 */
/** The largest certificate node:crypto (BoringSSL in Bun) reads too. */
export const MAX_CERT_BYTES = 100 * 1024;
/** Real certificates have 40 to 90 elements outside their extension values (the system roots: at most 86). */
export const MAX_ELEMENTS = 256;
export const MAX_DEPTH = 16;

/** Options for every asn1js parse: the limits above, and OCTET/BIT STRING contents left unparsed. */
const BER_OPTIONS: asn1js.FromBerOptions = {
  maxDepth: MAX_DEPTH,
  maxNodes: MAX_ELEMENTS,
  // Lengths are bounded by MAX_CERT_BYTES already; a larger declared length must reach our own check
  // below, which names it ("runs past its container", "length of 5 bytes").
  maxContentLength: Number.MAX_SAFE_INTEGER,
  parseEmbedded: false,
};

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
// DER on top of asn1js

/** The parts of an asn1js block this module looks at. */
interface Block {
  error?: string;
  idBlock: {
    tagClass: number;
    tagNumber: number;
    isConstructed: boolean;
    blockLength: number;
    error?: string;
  };
  lenBlock: {
    isIndefiniteForm: boolean;
    longFormUsed: boolean;
    length: number;
    blockLength: number;
    error?: string;
  };
  valueBlock: { value?: unknown; error?: string; blockLength: number };
  valueBeforeDecodeView?: Uint8Array;
}

const UNIVERSAL = 1;
const tagByte = (b: Block) =>
  ((b.idBlock.tagClass - 1) << 6) | (b.idBlock.isConstructed ? 0x20 : 0) | (b.idBlock.tagNumber & 0x1f);
const hex = (n: number) => `0x${n.toString(16).padStart(2, "0")}`;

/** Where a block starts, when asn1js recorded it: ` at byte N`, or "". */
function at(b: Block, base: Uint8Array | undefined): string {
  const view = b.valueBeforeDecodeView;
  return view && base && view.buffer === base.buffer ? ` at byte ${view.byteOffset - base.byteOffset}` : "";
}

function childrenOf(b: Block): Block[] {
  const v = b.valueBlock?.value;
  return b.idBlock?.isConstructed && Array.isArray(v) ? (v as Block[]) : [];
}

/** The content octets of a block that parsed (after its tag and length). */
function contentOf(b: Block): Uint8Array {
  const view = b.valueBeforeDecodeView ?? new Uint8Array(0);
  return view.subarray(b.idBlock.blockLength + b.lenBlock.blockLength);
}

/** asn1js's own failures, in our words. */
function libraryFault(error: string): string {
  if (error.includes("inconsistent offset and length")) return "an element runs past its container";
  if (error === "Zero buffer length" || error.startsWith("End of input reached"))
    return "truncated element (its tag or length is cut off)";
  if (error.includes("node count")) return `more than ${MAX_ELEMENTS} ASN.1 elements`;
  if (error.includes("nesting depth")) return `ASN.1 nested deeper than ${MAX_DEPTH} levels`;
  if (error.includes("0xFF is reserved")) return "reserved length octet 0xff";
  if (error.includes("Constructed encoding used for primitive type"))
    return "constructed encoding of a primitive type";
  if (error.includes("Too big integer")) return "length of more than 8 bytes";
  if (error.includes("Unused bits")) return "malformed BIT STRING";
  if (error.includes("is reserved")) return "reserved tag";
  if (error.includes("Wrong input string")) return "malformed time";
  return `malformed DER (${error.slice(0, 120)})`;
}

/** An exception asn1js threw (rather than reported), in our words: its text is not passed on. */
function thrownFault(e: unknown): string {
  const message = e instanceof Error ? e.message : "";
  return message.includes("Wrong input string") ? "malformed time" : "an element the library cannot decode";
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** The universal types that are always constructed: EXTERNAL, EMBEDDED PDV, SEQUENCE, SET, CHARACTER STRING. */
const CONSTRUCTED_TYPES = new Set([8, 11, 16, 17, 29]);

/** The first DER fault in the header of `b` (tag and length octets), if any. */
function headerFault(b: Block): string | undefined {
  const id = b.idBlock;
  if (id.error) return libraryFault(id.error);
  if (id.blockLength !== 1) return "multi-byte tag";
  const len = b.lenBlock;
  if (len.error) return libraryFault(len.error);
  if (len.isIndefiniteForm) return "indefinite length";
  if (len.longFormUsed) {
    const n = len.blockLength - 1;
    if (n > 4) return `length of ${n} bytes`;
    if (len.length < 0x80 || len.length < 2 ** (8 * (n - 1))) return "length not in shortest form";
  }
  if (id.tagClass === UNIVERSAL && id.tagNumber === 0) return "end-of-contents octets out of place";
  if (id.tagClass === UNIVERSAL && CONSTRUCTED_TYPES.has(id.tagNumber) !== id.isConstructed)
    return id.isConstructed
      ? "constructed encoding of a primitive type"
      : "primitive encoding of a constructed type";
  return undefined;
}

/** The first DER fault in the contents of a primitive universal element, if any. */
function contentFault(b: Block): string | undefined {
  if (b.idBlock.tagClass !== UNIVERSAL || b.idBlock.isConstructed) return undefined;
  const c = contentOf(b);
  switch (b.idBlock.tagNumber) {
    case 1: // BOOLEAN
      return c.length === 1 && (c[0] === 0 || c[0] === 0xff) ? undefined : "malformed BOOLEAN";
    case 2: // INTEGER
    case 10: // ENUMERATED
      if (c.length === 0) return "empty INTEGER";
      if (
        c.length > 1 &&
        ((c[0] === 0 && !((c[1] as number) & 0x80)) || (c[0] === 0xff && (c[1] as number) & 0x80))
      )
        return "INTEGER not in minimal form";
      return undefined;
    case 3: {
      // BIT STRING: the count of unused bits, which must be zero bits.
      const unused = c[0];
      if (unused === undefined || unused > 7 || (c.length === 1 && unused !== 0))
        return "malformed BIT STRING";
      if (unused && (c[c.length - 1] as number) & ((1 << unused) - 1)) return "BIT STRING padding not zero";
      return undefined;
    }
    case 5: // NULL
      return c.length === 0 ? undefined : "malformed NULL";
    case 6: // OBJECT IDENTIFIER: each arc in its shortest form, the last one complete.
      if (c.length === 0 || (c[c.length - 1] as number) & 0x80) return "malformed object identifier";
      for (let i = 0; i < c.length; i++)
        if (c[i] === 0x80 && (i === 0 || !((c[i - 1] as number) & 0x80)))
          return "object identifier not in minimal form";
      return undefined;
    case 13: // RELATIVE-OID
      return c.length === 0 ? "empty RELATIVE-OID" : undefined;
    case 12: // UTF8String
      try {
        utf8.decode(c);
        return undefined;
      } catch {
        return "UTF8String not in UTF-8";
      }
    case 28: // UniversalString: UCS-4
      return c.length % 4 === 0 ? undefined : "malformed UniversalString";
    case 30: // BMPString: UCS-2
      return c.length % 2 === 0 ? undefined : "malformed BMPString";
    default:
      return undefined;
  }
}

/** The first DER fault in document order, walking what asn1js parsed (also a partial tree). */
function derFault(root: Block, base: Uint8Array | undefined): string | undefined {
  const stack: Block[] = [root];
  while (stack.length > 0) {
    const b = stack.pop() as Block;
    if (!b.idBlock || !b.lenBlock) return b.error ? libraryFault(b.error) : "malformed DER";
    const header = headerFault(b);
    if (header) return `${header}${at(b, base)}`;
    const kids = childrenOf(b);
    if (b.error && kids.length === 0) return libraryFault(b.error);
    if (b.error) {
      // The failing child was not kept: report what came before it, else the failure itself.
      const earlier = kids.map((k) => derFault(k, base)).find((f) => f !== undefined);
      return earlier ?? libraryFault(b.error);
    }
    // asn1js lets an element run past the one that contains it, as long as the input goes on.
    if (b.idBlock.isConstructed && b.valueBlock.blockLength !== b.lenBlock.length)
      return `an element runs past its container${at(b, base)}`;
    const content = contentFault(b);
    if (content) return `${content}${at(b, base)}`;
    for (let i = kids.length - 1; i >= 0; i--) stack.push(kids[i] as Block);
  }
  return undefined;
}

/** One DER element, whole: parsed by asn1js within the limits, then held to DER. */
function parseDer(der: Uint8Array, what: string): Block {
  let parsed: asn1js.FromBerResult;
  try {
    parsed = asn1js.fromBER(der, BER_OPTIONS);
  } catch (e) {
    // asn1js throws (rather than reporting) on some malformed strings, e.g. times.
    const prefix = what === "certificate" ? "" : `${what}: `;
    throw new CertReadError(`${prefix}${thrownFault(e)}`);
  }
  const root = parsed.result as unknown as Block;
  const prefix = what === "certificate" ? "" : `${what}: `;
  const fault = derFault(root, root.valueBeforeDecodeView);
  if (fault) throw new CertReadError(`${prefix}${fault}`);
  if (parsed.offset === -1) throw new CertReadError(`${prefix}${libraryFault(root.error ?? "")}`);
  if (parsed.offset !== der.length) throw new CertReadError(`bytes after the ${what}`);
  return root;
}

/**
 * `root` as the asn1-schema type `type`, which must encode back to the same bytes: asn1-schema does not
 * check every tag (a SEQUENCE field accepts any constructed element) nor refuse every extra element, so
 * what it read is held to be exactly what was sent. The one difference allowed is a DEFAULT value written
 * out (an explicit version 1, critical or cA FALSE, a minimum of 0), which DER forbids but Go's and
 * BoringSSL's readers accept.
 */
function schema<T>(root: Block, type: new () => T, what: string, rfc = "RFC 5280"): T {
  const whole = what === "certificate";
  let value: T;
  let again: Uint8Array;
  try {
    value = AsnParser.fromASN(root as unknown as asn1js.AsnType, type);
    again = new Uint8Array(AsnConvert.serialize(value));
  } catch {
    throw new CertReadError(
      whole
        ? `not an X.509 certificate (not the ASN.1 structure ${rfc} defines)`
        : `${what}: not the ASN.1 structure ${rfc} defines`,
    );
  }
  const input = root.valueBeforeDecodeView;
  if (input && Buffer.compare(again, input) === 0) return value;
  let back: Block | undefined;
  try {
    const parsed = asn1js.fromBER(again, BER_OPTIONS);
    if (parsed.offset === again.length) back = parsed.result as unknown as Block;
  } catch {
    // refused below
  }
  if (back && sameBut(root, back, isDefault)) return value;
  throw new CertReadError(`${whole ? "" : `${what}: `}an element of the wrong type or out of place`);
}

/** DEFAULT values (X.690 11.5 says leave them out): BOOLEAN FALSE, [0] INTEGER 0 explicit or implicit. */
function isDefault(b: Block): boolean {
  const bytes = b.valueBeforeDecodeView;
  if (!bytes) return false;
  const hex = Buffer.from(bytes).toString("hex");
  return hex === "010100" || hex === "a003020100" || hex === "800100";
}

/** Whether `a` is `b` with, at most, some elements that `skippable` allows added. */
function sameBut(a: Block, b: Block, skippable: (x: Block) => boolean): boolean {
  if (tagByte(a) !== tagByte(b)) return false;
  if (!a.idBlock.isConstructed) return Buffer.compare(contentOf(a), contentOf(b)) === 0;
  const as = childrenOf(a);
  const bs = childrenOf(b);
  let j = 0;
  for (const x of as) {
    const y = bs[j];
    if (y && sameBut(x, y, skippable)) j++;
    else if (!skippable(x)) return false;
  }
  return j === bs.length;
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
  return timeOf(parseDer(der, "time"));
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
 * found by asn1js within the limits above. Their contents are read later, one by one.
 */
export function splitCertificates(buf: Uint8Array): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (let i = 0; i < buf.length; ) {
    const rest = buf.subarray(i, Math.min(buf.length, i + MAX_CERT_BYTES + 8));
    let parsed: asn1js.FromBerResult;
    try {
      parsed = asn1js.fromBER(rest, BER_OPTIONS);
    } catch {
      throw new CertReadError(`certificate list: certificate at byte ${i} cannot be read`);
    }
    const block = parsed.result as unknown as Block;
    if (parsed.offset === -1 || !block.idBlock || tagByte(block) !== 0x30)
      throw new CertReadError(
        `certificate list: no whole DER certificate at byte ${i}${parsed.offset === -1 && block.error ? ` (${libraryFault(block.error)})` : ""}`,
      );
    out.push(buf.subarray(i, i + parsed.offset));
    i += parsed.offset;
  }
  return out;
}
