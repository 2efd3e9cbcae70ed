import { X509Certificate as NativeCert } from "node:crypto";
import {
  children,
  DerError,
  expectTag,
  oidText,
  readBoolean,
  readSmallInt,
  readTime,
  readTlv,
  type Tlv,
} from "./der.ts";

/**
 * One parsed certificate: the facts SVID rules need, read from the DER by our own strict reader
 * (extensions and their criticality, which node:crypto does not expose), and a native handle for
 * signature checks.
 */
export interface Cert {
  readonly der: Uint8Array;
  readonly native: NativeCert;
  readonly subject: string;
  readonly issuer: string;
  readonly notBefore: Date;
  readonly notAfter: Date;
  /** undefined when the basicConstraints extension is absent. */
  readonly isCA: boolean | undefined;
  readonly pathLength: number | undefined;
  /** Bit mask of KeyUsage flags; undefined when the extension is absent. */
  readonly keyUsage: number | undefined;
  readonly uriSans: string[];
  readonly dnsSans: string[];
  /** The GeneralName tags of every other kind of subject alternative name the certificate carries. */
  readonly otherSanTags: number[];
  /** undefined when the nameConstraints extension is absent. */
  readonly nameConstraints: NameConstraints | undefined;
  /** Every extension's OID (dotted) and whether it is marked critical. */
  readonly extensions: readonly { readonly oid: string; readonly critical: boolean }[];
}

/** One GeneralSubtree base: its GeneralName tag (0x82 dNSName, 0x86 URI, …) and, for those two, its text. */
export interface NameConstraint {
  readonly tag: number;
  readonly value: string;
}
export interface NameConstraints {
  readonly permitted: readonly NameConstraint[];
  readonly excluded: readonly NameConstraint[];
}

/** GeneralName tags (RFC 5280 section 4.2.1.6), implicitly tagged. */
export const DNS_NAME = 0x82;
export const URI_NAME = 0x86;

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

export const OID = {
  subjectKeyIdentifier: "2.5.29.14",
  keyUsage: "2.5.29.15",
  subjectAltName: "2.5.29.17",
  basicConstraints: "2.5.29.19",
  nameConstraints: "2.5.29.30",
  authorityKeyIdentifier: "2.5.29.35",
  extKeyUsage: "2.5.29.37",
} as const;

interface Extensions {
  isCA: boolean | undefined;
  pathLength: number | undefined;
  keyUsage: number | undefined;
  uriSans: string[];
  dnsSans: string[];
  otherSanTags: number[];
  nameConstraints: NameConstraints | undefined;
  list: { oid: string; critical: boolean }[];
}

const noExtensions = (): Extensions => ({
  isCA: undefined,
  pathLength: undefined,
  keyUsage: undefined,
  uriSans: [],
  dnsSans: [],
  otherSanTags: [],
  nameConstraints: undefined,
  list: [],
});

const ia5 = (der: Uint8Array, t: Tlv) => Buffer.from(der.subarray(t.start, t.end)).toString("latin1");

function readBasicConstraints(der: Uint8Array, value: Tlv, x: Extensions): void {
  const seq = expectTag(readTlv(der, value.start, value.end), 0x30, "basicConstraints");
  let fields = children(der, seq);
  x.isCA = false;
  if (fields[0]?.tag === 0x01) {
    x.isCA = readBoolean(der, fields[0]);
    fields = fields.slice(1);
  }
  if (fields[0]?.tag === 0x02) {
    x.pathLength = readSmallInt(der, fields[0]);
    fields = fields.slice(1);
  }
  if (fields.length > 0) throw new DerError("basicConstraints: unexpected field");
}

function readKeyUsage(der: Uint8Array, value: Tlv, x: Extensions): void {
  const bits = expectTag(readTlv(der, value.start, value.end), 0x03, "keyUsage");
  if (bits.end - bits.start < 1 || (der[bits.start] as number) > 7)
    throw new DerError("keyUsage: malformed BIT STRING");
  let flags = 0;
  for (let i = 0; i < 9; i++) {
    const byte = der[bits.start + 1 + (i >> 3)];
    if (bits.start + 1 + (i >> 3) < bits.end && byte !== undefined && byte & (0x80 >> (i & 7)))
      flags |= 1 << i;
  }
  x.keyUsage = flags;
}

function readSubjectAltName(der: Uint8Array, value: Tlv, x: Extensions): void {
  const seq = expectTag(readTlv(der, value.start, value.end), 0x30, "subjectAltName");
  for (const name of children(der, seq)) {
    if (name.tag === URI_NAME) x.uriSans.push(ia5(der, name));
    else if (name.tag === DNS_NAME) x.dnsSans.push(ia5(der, name));
    else x.otherSanTags.push(name.tag);
  }
}

function readSubtrees(der: Uint8Array, t: Tlv): NameConstraint[] {
  return children(der, t).map((subtree) => {
    const base = children(der, expectTag(subtree, 0x30, "nameConstraints subtree"))[0];
    if (!base) throw new DerError("nameConstraints: empty subtree");
    const text = base.tag === URI_NAME || base.tag === DNS_NAME;
    return { tag: base.tag, value: text ? ia5(der, base) : "" };
  });
}

function readNameConstraints(der: Uint8Array, value: Tlv, x: Extensions): void {
  const seq = expectTag(readTlv(der, value.start, value.end), 0x30, "nameConstraints");
  let permitted: NameConstraint[] = [];
  let excluded: NameConstraint[] = [];
  for (const part of children(der, seq)) {
    if (part.tag === 0xa0) permitted = readSubtrees(der, part);
    else if (part.tag === 0xa1) excluded = readSubtrees(der, part);
    else throw new DerError("nameConstraints: unexpected field");
  }
  x.nameConstraints = { permitted, excluded };
}

function readExtensions(der: Uint8Array, wrapper: Tlv): Extensions {
  const x = noExtensions();
  const seq = expectTag(readTlv(der, wrapper.start, wrapper.end), 0x30, "extensions");
  for (const ext of children(der, seq)) {
    const parts = children(der, expectTag(ext, 0x30, "extension"));
    const oid = oidText(der, expectTag(parts[0], 0x06, "extension id"));
    let i = 1;
    let critical = false;
    if (parts[i]?.tag === 0x01) critical = readBoolean(der, parts[i++] as Tlv);
    const value = expectTag(parts[i], 0x04, `extension ${oid} value`);
    if (parts.length !== i + 1) throw new DerError(`extension ${oid}: unexpected field`);
    if (x.list.some((e) => e.oid === oid)) throw new DerError(`extension ${oid} appears twice`);
    x.list.push({ oid, critical });
    if (oid === OID.basicConstraints) readBasicConstraints(der, value, x);
    else if (oid === OID.keyUsage) readKeyUsage(der, value, x);
    else if (oid === OID.subjectAltName) readSubjectAltName(der, value, x);
    else if (oid === OID.nameConstraints) readNameConstraints(der, value, x);
  }
  return x;
}

/** Parses one DER certificate; throws an Error naming what is malformed. */
export function parseCert(der: Uint8Array): Cert {
  const cert = expectTag(readTlv(der, 0), 0x30, "certificate");
  if (cert.end !== der.length) throw new DerError("bytes after the certificate");
  const tbs = expectTag(children(der, cert)[0], 0x30, "tbsCertificate");
  const fields = children(der, tbs);
  // version [0] is optional; then serial, signature, issuer, validity, subject, key, then optional
  // issuerUniqueID [1], subjectUniqueID [2] and extensions [3].
  const rest = fields[0]?.tag === 0xa0 ? fields.slice(1) : fields;
  const validity = children(der, expectTag(rest[3], 0x30, "validity"));
  const ext = rest.slice(6).find((f) => f.tag === 0xa3);
  const x = ext ? readExtensions(der, ext) : noExtensions();
  const native = new NativeCert(Buffer.from(der));
  return {
    der,
    native,
    subject: native.subject.replaceAll("\n", ", "),
    issuer: native.issuer.replaceAll("\n", ", "),
    notBefore: readTime(der, validity[0] as Tlv),
    notAfter: readTime(der, validity[1] as Tlv),
    isCA: x.isCA,
    pathLength: x.pathLength,
    keyUsage: x.keyUsage,
    uriSans: x.uriSans,
    dnsSans: x.dnsSans,
    otherSanTags: x.otherSanTags,
    nameConstraints: x.nameConstraints,
    extensions: x.list,
  };
}

/** True when `child` names `parent` as issuer and `parent`'s key verifies `child`'s signature. */
export function isSignedBy(child: Cert, parent: Cert): boolean {
  return child.native.checkIssued(parent.native) && child.native.verify(parent.native.publicKey);
}

/** Splits concatenated DER certificates (the Workload API's encoding of chains and bundles). */
export function splitDer(buf: Uint8Array): Uint8Array[] {
  const out: Uint8Array[] = [];
  let i = 0;
  while (i < buf.length) {
    if (buf[i] !== 0x30) throw new Error(`not a DER sequence at byte ${i}`);
    const first = buf[i + 1] ?? 0;
    let len: number;
    let header: number;
    if (first < 0x80) {
      len = first;
      header = 2;
    } else {
      const n = first & 0x7f;
      if (n === 0 || n > 4) throw new Error(`unsupported DER length at byte ${i}`);
      len = 0;
      for (let k = 0; k < n; k++) len = len * 256 + (buf[i + 2 + k] ?? 0);
      header = 2 + n;
    }
    const end = i + header + len;
    if (end > buf.length) throw new Error("truncated DER certificate");
    out.push(buf.subarray(i, end));
    i = end;
  }
  return out;
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
