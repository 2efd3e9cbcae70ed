/**
 * X.509-SVIDs to the X.509-SVID standard (spiffe/spiffe standards/X509-SVID.md): exactly one URI SAN
 * holding a SPIFFE ID with a non-root path, not a CA, digitalSignature and neither keyCertSign nor
 * cRLSign; signing certificates are CAs with keyCertSign; the chain ends at an authority in the bundle
 * of the leaf's own trust domain. Beyond the standard: no RSA key under 2048 bits and no MD5 or SHA-1
 * signature anywhere on the chain, the trust anchor included (checkStrength).
 */
import { createPrivateKey, createPublicKey } from "node:crypto";
import { SvcError } from "../errors.ts";
import type { BundleSource } from "./bundle.ts";
import {
  type Cert,
  DNS_NAME,
  derToPem,
  isSignedBy,
  KeyUsage,
  type NameConstraint,
  OID,
  parseCert,
  splitDer,
  URI_NAME,
} from "./cert.ts";
import { parseSpiffeId, type SpiffeId } from "./id.ts";

export interface X509Svid {
  readonly id: SpiffeId;
  /** Leaf first. */
  readonly chain: readonly Cert[];
  readonly keyPem: string;
  readonly certPem: string;
  readonly notAfter: Date;
  readonly hint: string;
}

const MAX_CHAIN = 10;

function svidError(why: string): SvcError {
  return new SvcError("invalid_svid", `invalid X.509-SVID: ${why}`);
}

// The extensions whose meaning these rules take into account; any other one marked critical is refused,
// as RFC 5280 section 4.2 requires and Go's x509.Verify (under go-spiffe) does. Policy extensions are
// not among them: no policy processing is done, so a critical one is refused too.
const UNDERSTOOD = new Set<string>(Object.values(OID));

/**
 * What a message calls a certificate. A function when it names a subject: names are formatted (by
 * @peculiar/x509, loaded then) only for a message that is thrown, never on the way through.
 */
type Label = string | (() => string);
const text = (what: Label) => (typeof what === "string" ? what : what());
const named = (kind: string, cert: Cert) => () => `${kind} "${cert.subject}"`;

function checkCritical(cert: Cert, what: Label): void {
  const unknown = cert.extensions.find((e) => e.critical && !UNDERSTOOD.has(e.oid));
  if (unknown)
    throw svidError(`${text(what)} has a critical extension svc does not understand (${unknown.oid})`);
}

/**
 * Key and signature strength, as `openssl verify -auth_level 2` holds them: RSA keys of fewer than 2048
 * bits, and signatures over MD2, MD4, MD5 or SHA-1, are refused on every certificate of a chain, the trust
 * anchor included (its own signature too, which OpenSSL checks only with -check_ss_sig).
 */
const MIN_RSA_BITS = 2048;

function checkStrength(cert: Cert, what: Label): void {
  const { rsaBits } = cert.publicKey;
  if (rsaBits !== undefined && rsaBits < MIN_RSA_BITS)
    throw svidError(`${text(what)} has a ${rsaBits}-bit RSA key; at least ${MIN_RSA_BITS} bits are required`);
  const { weakHash, name } = cert.signature;
  if (weakHash) throw svidError(`${text(what)} is signed with ${weakHash} (${name}), which is refused`);
}

/** The leaf rules shared by our own SVIDs and peers'. Returns the leaf's SPIFFE ID. */
export function checkLeaf(leaf: Cert): SpiffeId {
  checkCritical(leaf, "the leaf");
  if (leaf.uriSans.length !== 1) {
    throw svidError(`the leaf has ${leaf.uriSans.length} URI SANs; exactly one is required`);
  }
  let id: SpiffeId;
  try {
    id = parseSpiffeId(leaf.uriSans[0] as string);
  } catch (e) {
    throw svidError(`the leaf URI SAN is not a SPIFFE ID (${(e as Error).message})`);
  }
  if (id.path === "") throw svidError(`the leaf ID ${id.uri} has no path; a workload ID needs one`);
  checkStrength(leaf, `the leaf ${id.uri}`);
  if (leaf.isCA) throw svidError(`the leaf ${id.uri} is a CA certificate`);
  const ku = leaf.keyUsage;
  if (ku === undefined) throw svidError(`the leaf ${id.uri} has no key usage extension`);
  if (!(ku & KeyUsage.digitalSignature))
    throw svidError(`the leaf ${id.uri} lacks the digitalSignature key usage`);
  if (ku & KeyUsage.keyCertSign) throw svidError(`the leaf ${id.uri} has the keyCertSign key usage`);
  if (ku & KeyUsage.cRLSign) throw svidError(`the leaf ${id.uri} has the cRLSign key usage`);
  return id;
}

function checkSigning(cert: Cert): void {
  const what = named("signing certificate", cert);
  checkCritical(cert, what);
  if (!cert.isCA) throw svidError(`${what()} is not a CA`);
  checkStrength(cert, what);
  if (cert.keyUsage !== undefined && !(cert.keyUsage & KeyUsage.keyCertSign)) {
    throw svidError(`${what()} lacks the keyCertSign key usage`);
  }
}

function checkTime(cert: Cert, now: Date, what: Label): void {
  if (now < cert.notBefore)
    throw svidError(`${text(what)} is not valid before ${cert.notBefore.toISOString()}`);
  if (now > cert.notAfter) throw svidError(`${text(what)} expired at ${cert.notAfter.toISOString()}`);
}

export interface VerifiedPeer {
  readonly id: SpiffeId;
  /** The verified chain, leaf first, ending with the trust anchor from the bundle. */
  readonly chain: readonly Cert[];
  /** When the first certificate of the chain expires: the peer is verified until then, and no longer. */
  readonly notAfter: Date;
}

/**
 * Verifies a presented chain (leaf first, DER) against the bundle of the leaf's trust domain.
 * Throws SvcError("invalid_svid") for SVID rule faults and ("untrusted_peer") for chain faults.
 */
export function verifyX509Svid(
  presented: readonly Uint8Array[],
  bundles: BundleSource,
  now = new Date(),
): VerifiedPeer {
  if (presented.length === 0) throw svidError("the peer sent no certificate");
  const certs = presented.slice(0, MAX_CHAIN).map(parseCert);
  const leaf = certs[0] as Cert;
  const id = checkLeaf(leaf);
  const bundle = bundles.getX509Bundle(id.trustDomain);
  if (!bundle || bundle.authorities.length === 0) {
    throw new SvcError(
      "untrusted_peer",
      `no trust bundle for trust domain "${id.trustDomain}" of peer ${id.uri}`,
    );
  }
  checkTime(leaf, now, `the certificate of ${id.uri}`);
  const chain: Cert[] = [leaf];
  let current = leaf;
  const intermediates = certs.slice(1);
  for (let depth = 0; depth < MAX_CHAIN; depth++) {
    const anchor = bundle.authorities.find((a) => isSignedBy(current, a));
    if (anchor) {
      const what = named("trust anchor", anchor);
      checkCritical(anchor, what);
      checkStrength(anchor, what);
      checkTime(anchor, now, what);
      checkPathLength([...chain.slice(1), anchor]);
      chain.push(anchor);
      for (const signer of chain.slice(1)) checkNameConstraints(leaf, signer);
      return { id, chain, notAfter: new Date(Math.min(...chain.map((c) => c.notAfter.getTime()))) };
    }
    const next = intermediates.find((c) => !chain.includes(c) && isSignedBy(current, c));
    if (!next) break;
    checkSigning(next);
    checkTime(next, now, named("intermediate", next));
    chain.push(next);
    current = next;
  }
  throw new SvcError(
    "untrusted_peer",
    `certificate of ${id.uri} does not chain to the trust bundle of "${id.trustDomain}"`,
  );
}

/**
 * A DNS name or URI host against one constraint (RFC 5280 section 4.2.1.10), case-insensitively. A DNS
 * constraint covers the name and every subdomain; a URI constraint names one host, or with a leading
 * period every subdomain of it.
 */
function matches(host: string, c: NameConstraint): boolean {
  const h = host.toLowerCase();
  const v = c.value.toLowerCase();
  if (v === "") return c.tag === DNS_NAME;
  if (v.startsWith(".")) return h.endsWith(v);
  return h === v || (c.tag === DNS_NAME && h.endsWith(`.${v}`));
}

/** The leaf's names against one signing certificate's name constraints, as Go's x509.Verify checks them. */
function checkNameConstraints(leaf: Cert, signer: Cert): void {
  const nc = signer.nameConstraints;
  if (!nc) return;
  const by = () => `the name constraints of "${signer.subject}"`;
  for (const c of [...nc.permitted, ...nc.excluded]) {
    if (c.tag === DNS_NAME || c.tag === URI_NAME) continue;
    // Constraints on subject names (directoryName) or on kinds of names svc does not read: fail closed when
    // they could apply.
    if (c.tag === 0xa4 || leaf.otherSanTags.includes(c.tag)) {
      throw svidError(`${by()} include a kind svc does not check (GeneralName tag 0x${c.tag.toString(16)})`);
    }
  }
  const names: [number, string][] = [
    ...leaf.dnsSans.map((n): [number, string] => [DNS_NAME, n]),
    ...leaf.uriSans.map((u): [number, string] => [URI_NAME, u]),
  ];
  for (const [tag, name] of names) {
    const excluded = nc.excluded.filter((c) => c.tag === tag);
    const permitted = nc.permitted.filter((c) => c.tag === tag);
    if (excluded.length + permitted.length === 0) continue;
    const host = tag === URI_NAME ? uriHost(name) : name;
    // A trailing dot or an empty label would make `example.org.` slip past an exclusion of `example.org`.
    if (host === "" || host.endsWith(".") || host.includes("..")) {
      throw svidError(`${name} has a host name that cannot be matched against ${by()}`);
    }
    const hit = excluded.find((c) => matches(host, c));
    if (hit) throw svidError(`${name} is excluded by ${by()} (${hit.value})`);
    if (permitted.length > 0 && !permitted.some((c) => matches(host, c))) {
      throw svidError(`${name} is not permitted by ${by()} (${permitted.map((c) => c.value).join(", ")})`);
    }
  }
}

/** The host of a URI SAN; refused when there is none (RFC 5280: such a URI cannot be matched). */
function uriHost(uri: string): string {
  const m = /^[a-zA-Z][a-zA-Z0-9+.-]*:\/\/(?:[^@/?#]*@)?(\[[^\]]*\]|[^:/?#]*)/.exec(uri);
  const host = m?.[1] ?? "";
  if (host === "" || host.startsWith("[") || /^\d+\.\d+\.\d+\.\d+$/.test(host)) {
    throw svidError(`the URI ${uri} has no host name to match name constraints against`);
  }
  return host;
}

// Each signing certificate's pathLenConstraint bounds the intermediates below it.
function checkPathLength(signers: Cert[]): void {
  signers.forEach((cert, index) => {
    if (cert.pathLength !== undefined && index > cert.pathLength) {
      throw svidError(`path length constraint of "${cert.subject}" exceeded`);
    }
  });
}

/**
 * Our own SVID as the Workload API hands it over: a DER chain (concatenated) and a PKCS#8 key.
 * Stricter than peer verification: intermediates must be CAs and the key must match the leaf.
 */
export function parseX509Svid(chainDer: Uint8Array, keyDer: Uint8Array, hint = ""): X509Svid {
  const chain = splitDer(chainDer).map(parseCert);
  const leaf = chain[0];
  if (!leaf) throw svidError("the SVID holds no certificate");
  const id = checkLeaf(leaf);
  for (const signer of chain.slice(1)) {
    checkSigning(signer);
    checkNameConstraints(leaf, signer);
  }
  const key = createPrivateKey({ key: Buffer.from(keyDer), format: "der", type: "pkcs8" });
  const want = leaf.native.publicKey.export({ type: "spki", format: "der" });
  const have = createPublicKey(key).export({ type: "spki", format: "der" });
  if (!want.equals(have)) throw svidError(`the private key does not match the certificate of ${id.uri}`);
  return {
    id,
    chain,
    keyPem: key.export({ type: "pkcs8", format: "pem" }) as string,
    certPem: chain.map((c) => derToPem(c.der)).join(""),
    notAfter: leaf.notAfter,
    hint,
  };
}
