import "reflect-metadata";
import { X509Certificate as NativeCert } from "node:crypto";
import * as x509 from "@peculiar/x509";

/**
 * One parsed certificate: the facts SVID rules need (from @peculiar/x509, which exposes extensions and
 * their criticality) and a native handle for fast signature checks.
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
  /** Bit mask of x509.KeyUsageFlags; undefined when the extension is absent. */
  readonly keyUsage: number | undefined;
  readonly uriSans: string[];
}

export const KeyUsage = x509.KeyUsageFlags;

export function parseCert(der: Uint8Array): Cert {
  const c = new x509.X509Certificate(der);
  const bc = c.getExtension(x509.BasicConstraintsExtension);
  const ku = c.getExtension(x509.KeyUsagesExtension);
  const san = c.getExtension(x509.SubjectAlternativeNameExtension);
  return {
    der,
    native: new NativeCert(Buffer.from(der)),
    subject: c.subject,
    issuer: c.issuer,
    notBefore: c.notBefore,
    notAfter: c.notAfter,
    isCA: bc ? bc.ca : undefined,
    pathLength: bc?.pathLength,
    keyUsage: ku ? ku.usages : undefined,
    uriSans: san ? san.names.items.filter((n) => n.type === "url").map((n) => n.value) : [],
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
