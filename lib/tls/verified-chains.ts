/**
 * verifyX509Svid for TLS handshakes, remembered per presented chain. A peer that reconnects presents the
 * same certificates, and re-parsing and re-checking them in JavaScript is most of the cost of a new
 * connection (docs/benchmarks.md). A remembered result is used only while the same trust bundle object is
 * in force for the peer's trust domain (bundles are replaced, never changed, on update) and while every
 * certificate of the verified chain is within its validity period; otherwise the chain is verified again.
 * Failures are not remembered here (parseCert remembers certificates it refused). Keys are the SHA-256 of
 * the chain (each certificate's length, then its bytes), so no two chains share an entry.
 */
import { createHash } from "node:crypto";
import { SvcError } from "../errors.ts";
import type { BundleSource } from "../spiffe/bundle.ts";
import { type VerifiedPeer, verifyX509Svid } from "../spiffe/x509svid.ts";

interface Entry {
  peer: VerifiedPeer;
  bundle: unknown;
  from: number;
  until: number;
}

const MAX_ENTRIES = 1024;
const cache = new Map<string, Entry>();

function keyOf(chain: readonly Uint8Array[]): string {
  const h = createHash("sha256");
  const length = Buffer.alloc(4);
  for (const der of chain) {
    length.writeUInt32BE(der.byteLength);
    h.update(length).update(der);
  }
  return h.digest("base64");
}

export function verifyPeerChain(
  chain: readonly Uint8Array[],
  bundles: BundleSource,
  now = new Date(),
): VerifiedPeer {
  const key = keyOf(chain);
  const t = now.getTime();
  const hit = cache.get(key);
  if (hit && t >= hit.from && t <= hit.until && bundles.getX509Bundle(hit.peer.id.trustDomain) === hit.bundle)
    return hit.peer;
  let peer: VerifiedPeer;
  try {
    peer = verifyX509Svid(chain, bundles, now);
  } catch (e) {
    // Every refusal is ours to word; nothing else (a TypeError, a native error's text) reaches a peer's log.
    if (e instanceof SvcError) throw e;
    throw new SvcError("untrusted_peer", "the peer's certificate chain could not be verified");
  }
  cache.delete(key);
  if (cache.size >= MAX_ENTRIES) cache.delete(cache.keys().next().value as string);
  cache.set(key, {
    peer,
    bundle: bundles.getX509Bundle(peer.id.trustDomain),
    from: Math.max(...peer.chain.map((c) => c.notBefore.getTime())),
    until: peer.notAfter.getTime(),
  });
  return peer;
}
