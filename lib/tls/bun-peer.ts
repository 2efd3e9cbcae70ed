/**
 * SPIFFE peer verification on Bun's own TLS sockets (Bun.listen / Bun.connect), where the TLS stack is
 * given every trust bundle as `ca` and builds the chain itself, but the application sees only the peer's
 * leaf, never the intermediates it presented.
 *
 * - BoringSSL must have verified the chain. On the client side the only error allowed is the host name
 *   mismatch (SVIDs carry a URI SAN, not a DNS name): the chain check comes first, so that error means
 *   the chain was good.
 * - A leaf signed directly by an authority of its own trust domain is then verified completely here,
 *   as on the node:tls path.
 * - A leaf signed by an intermediate can only be accepted when we hold a single trust domain's bundle:
 *   then the anchor BoringSSL found is that domain's, and the leaf must be of that domain. With federated
 *   bundles the anchor could belong to another domain, so such a peer is refused (fails closed).
 */
import type { Socket } from "bun";
import { SvcError } from "../errors.ts";
import type { Authorizer } from "../spiffe/authorizer.ts";
import { parseCert } from "../spiffe/cert.ts";
import type { SvidSource } from "../spiffe/x509-source.ts";
import { checkLeaf, type VerifiedPeer } from "../spiffe/x509svid.ts";
import { verifyPeerChain } from "./verified-chains.ts";

const HOSTNAME_ONLY = "ERR_TLS_CERT_ALTNAME_INVALID";

export function verifyBunPeer(
  socket: Socket<unknown>,
  side: "client" | "server",
  source: SvidSource,
  authorize: Authorizer,
): VerifiedPeer {
  const error = socket.getAuthorizationError() as (Error & { code?: string }) | null;
  const chainOk = side === "server" ? socket.authorized && !error : !error || error.code === HOSTNAME_ONLY;
  if (!chainOk)
    throw new SvcError(
      "untrusted_peer",
      // The TLS library's reason code (CERT_HAS_EXPIRED, UNABLE_TO_GET_ISSUER_CERT, …), never its text.
      `TLS handshake failed: ${error ? (error.code ?? "the TLS library refused the peer's certificate") : "the peer presented no certificate"}`,
    );
  const raw = (socket.getPeerCertificate() as { raw?: Uint8Array } | undefined)?.raw;
  if (!raw) throw new SvcError("untrusted_peer", "the peer presented no certificate");
  const leaf = new Uint8Array(raw);
  let peer: VerifiedPeer;
  try {
    peer = verifyPeerChain([leaf], source);
  } catch (e) {
    const domains = source.bundles().trustDomains();
    if (!(e instanceof SvcError) || e.code !== "untrusted_peer") throw e;
    if (domains.length !== 1)
      throw new SvcError(
        "untrusted_peer",
        `${e.message} (a leaf signed by an intermediate CA cannot be checked against federated bundles on this path)`,
      );
    const cert = parseCert(leaf);
    const id = checkLeaf(cert);
    if (id.trustDomain !== domains[0]) throw e;
    const now = new Date();
    if (now < cert.notBefore || now > cert.notAfter)
      throw new SvcError("invalid_svid", `invalid X.509-SVID: the certificate of ${id.uri} is out of date`);
    peer = { id, chain: [cert], notAfter: cert.notAfter };
  }
  const decision = authorize(peer.id);
  if (!decision.allowed) throw new SvcError("unauthorized_peer", decision.reason);
  return peer;
}

/** The TLS options of a Bun socket that presents our SVID and checks the peer against every bundle. */
export interface BunTlsOptions {
  cert: string;
  key: string;
  ca: string;
}

export function bunTlsOptions(source: SvidSource): BunTlsOptions {
  const svid = source.getX509Svid();
  return { cert: svid.certPem, key: svid.keyPem, ca: source.bundles().pem() };
}

/** The Bun TLS options of a source as they stand, for each new connection (see followBunTls). */
export interface BunTlsFollower<Extra extends object> {
  /** Our SVID and the bundles as of the last update, with the side's own options. */
  current(): BunTlsOptions & Extra;
  /** Stops following the source's updates. */
  close(): void;
}

/**
 * The TLS options of `source` (bunTlsOptions) and `extra` (the options of one side: a server's
 * requestCert, a client's servername, …), read now and again on each update of the source (an SVID
 * rotation, new bundles), for Bun's own sockets: the counterpart of attachSpiffeAuth's
 * setSecureContext on node:tls servers. New connections take current(); established ones keep the
 * options they were made with. `updated`, if given, is called after each update has been read.
 */
export function followBunTls<Extra extends object = Record<never, never>>(
  source: SvidSource,
  extra?: Extra,
  updated?: () => void,
): BunTlsFollower<Extra> {
  const read = () => ({ ...bunTlsOptions(source), ...extra }) as BunTlsOptions & Extra;
  let options = read();
  const unsubscribe = source.onUpdate(() => {
    options = read();
    updated?.();
  });
  return { current: () => options, close: unsubscribe };
}
