import { createPrivateKey, createPublicKey } from "node:crypto";
import { SvcError } from "../errors.ts";
import type { BundleSource } from "./bundle.ts";
import { type Cert, derToPem, isSignedBy, KeyUsage, parseCert, splitDer } from "./cert.ts";
import { parseSpiffeId, type SpiffeId } from "./id.ts";

/**
 * X.509-SVIDs to the X.509-SVID standard (spiffe/spiffe standards/X509-SVID.md): exactly one URI SAN
 * holding a SPIFFE ID with a non-root path, not a CA, digitalSignature and neither keyCertSign nor
 * cRLSign; signing certificates are CAs with keyCertSign; the chain ends at an authority in the bundle
 * of the leaf's own trust domain.
 */
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

/** The leaf rules shared by our own SVIDs and peers'. Returns the leaf's SPIFFE ID. */
export function checkLeaf(leaf: Cert): SpiffeId {
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
  if (!cert.isCA) throw svidError(`signing certificate "${cert.subject}" is not a CA`);
  if (cert.keyUsage !== undefined && !(cert.keyUsage & KeyUsage.keyCertSign)) {
    throw svidError(`signing certificate "${cert.subject}" lacks the keyCertSign key usage`);
  }
}

function checkTime(cert: Cert, now: Date, what: string): void {
  if (now < cert.notBefore) throw svidError(`${what} is not valid before ${cert.notBefore.toISOString()}`);
  if (now > cert.notAfter) throw svidError(`${what} expired at ${cert.notAfter.toISOString()}`);
}

export interface VerifiedPeer {
  readonly id: SpiffeId;
  /** The verified chain, leaf first, ending with the trust anchor from the bundle. */
  readonly chain: readonly Cert[];
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
      checkTime(anchor, now, `trust anchor "${anchor.subject}"`);
      checkPathLength([...chain.slice(1), anchor]);
      chain.push(anchor);
      return { id, chain };
    }
    const next = intermediates.find((c) => !chain.includes(c) && isSignedBy(current, c));
    if (!next) break;
    checkSigning(next);
    checkTime(next, now, `intermediate "${next.subject}"`);
    chain.push(next);
    current = next;
  }
  throw new SvcError(
    "untrusted_peer",
    `certificate of ${id.uri} does not chain to the trust bundle of "${id.trustDomain}"`,
  );
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
  for (const signer of chain.slice(1)) checkSigning(signer);
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
