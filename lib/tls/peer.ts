import type { PeerCertificate, TLSSocket } from "node:tls";
import { SvcError } from "../errors.ts";
import type { Authorizer } from "../spiffe/authorizer.ts";
import type { BundleSource } from "../spiffe/bundle.ts";
import type { VerifiedPeer } from "../spiffe/x509svid.ts";
import { verifyPeerChain } from "./verified-chains.ts";

/** The certificates the peer presented, leaf first, as DER. */
export function presentedChain(socket: TLSSocket): Uint8Array[] {
  return chainOf(socket.getPeerCertificate(true));
}

/** The DER chain of a detailed peer certificate (as getPeerCertificate(true) and checkServerIdentity give it). */
function chainOf(peerCert: PeerCertificate | undefined): Uint8Array[] {
  const chain: Uint8Array[] = [];
  let cert = peerCert as (PeerCertificate & { issuerCertificate?: PeerCertificate }) | undefined;
  while (cert?.raw && chain.length < 10) {
    chain.push(new Uint8Array(cert.raw));
    const next = cert.issuerCertificate;
    if (!next || next === cert || next.raw?.equals(cert.raw)) break;
    cert = next;
  }
  return chain;
}

/**
 * Authenticates the peer of an established TLS socket the SPIFFE way: the chain must lead to the bundle
 * of the peer's own trust domain (no hostname check), then the authorizer decides. Throws SvcError with
 * code untrusted_peer, invalid_svid or unauthorized_peer and a reason fit for logs.
 */
export function authenticatePeer(
  socket: TLSSocket,
  bundles: BundleSource,
  authorize: Authorizer,
): VerifiedPeer {
  const peer = verifyPeerChain(presentedChain(socket), bundles);
  const decision = authorize(peer.id);
  if (!decision.allowed) throw new SvcError("unauthorized_peer", decision.reason);
  return peer;
}

/**
 * A `checkServerIdentity` for node:tls and https clients that applies the SPIFFE rules instead of a
 * hostname check: the server's chain must lead to the bundle of its own trust domain, then `authorize`
 * decides. `onVerified` receives the verified peer (its SPIFFE ID) for the caller to keep.
 */
export function spiffeServerIdentity(
  bundles: BundleSource,
  authorize?: Authorizer,
  onVerified?: (peer: VerifiedPeer) => void,
): (host: string, cert: PeerCertificate) => Error | undefined {
  return (_host, cert) => {
    try {
      const peer = verifyPeerChain(chainOf(cert), bundles);
      const decision = authorize?.(peer.id);
      if (decision && !decision.allowed) return new SvcError("unauthorized_peer", decision.reason);
      onVerified?.(peer);
      return undefined;
    } catch (e) {
      return e instanceof SvcError
        ? e
        : new SvcError("untrusted_peer", "the server's certificate chain could not be verified");
    }
  };
}
