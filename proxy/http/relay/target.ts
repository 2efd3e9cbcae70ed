/**
 * How the relay reaches a listener's target on Bun's own sockets, for both of its protocols: plaintext,
 * ordinary HTTPS (the system's trust store and a host name check), or SPIFFE mTLS (our SVID, every
 * bundle as `ca`, then verifyBunPeer and the `target.spiffe_ids` restriction before a byte is sent).
 * With `alpn`, the TLS handshake offers that protocol alone and the target must choose it.
 */
import { isIP } from "node:net";
import type { Socket } from "bun";
import type { Authorizer } from "../../../lib/spiffe/authorizer.ts";
import type { SvidSource } from "../../../lib/spiffe/x509-source.ts";
import { type BunTlsFollower, followBunTls, verifyBunPeer } from "../../../lib/tls/bun-peer.ts";
import { socketHost } from "../../../lib/url-host.ts";
import type { Upstream as VerifiedUpstream } from "../types.ts";

export interface TargetOptions {
  target: URL;
  /** SPIFFE mTLS to the target, restricted by `authorize`. */
  spiffe?: { source: SvidSource; authorize: Authorizer };
  /** The one application protocol offered in the TLS handshake (ALPN), such as "h2". */
  alpn?: string;
}

export interface CheckedTarget {
  /** Who answered, on SPIFFE mTLS. */
  verified: VerifiedUpstream | undefined;
  /** When the connection stops being usable (ms): the first expiry of the verified peer chain or of the
   * SVID this proxy presented on it. */
  validUntil: number;
}

export class RelayTarget {
  readonly host: string;
  readonly port: number;
  readonly tls: boolean;
  /** Counts SVID rotations: connections made before the last one are retired by their owners. */
  generation = 0;
  /** The name sent in the TLS handshake (SNI): the target's host, unless it is an IP address. */
  private readonly servername: { serverName?: string };
  private readonly alpn: { ALPNProtocols?: Buffer };
  /** For SPIFFE mTLS: our SVID and the bundles, read again after each rotation. */
  private readonly spiffeTls:
    | BunTlsFollower<{ rejectUnauthorized: boolean; serverName?: string; ALPNProtocols?: Buffer }>
    | undefined;

  /** `rotated` is called after each SVID rotation (SPIFFE mTLS targets). */
  constructor(
    private readonly o: TargetOptions,
    rotated: () => void = () => {},
  ) {
    this.tls = o.target.protocol === "https:";
    this.host = socketHost(o.target.hostname);
    this.port = Number(o.target.port) || (this.tls ? 443 : 80);
    this.servername = isIP(this.host) ? {} : { serverName: this.host };
    // Bun takes ALPN protocols in their wire form: each name after its length.
    this.alpn = o.alpn
      ? { ALPNProtocols: Buffer.from(String.fromCharCode(o.alpn.length) + o.alpn, "latin1") }
      : {};
    this.spiffeTls = o.spiffe
      ? followBunTls(o.spiffe.source, { rejectUnauthorized: false, ...this.servername, ...this.alpn }, () => {
          this.generation++;
          rotated();
        })
      : undefined;
  }

  /** Bun.connect's address and TLS options for a new connection. */
  connectOptions(): { hostname: string; port: number; tls?: object } {
    const tls = this.spiffeTls
      ? this.spiffeTls.current()
      : this.tls
        ? { rejectUnauthorized: true, ...this.servername, ...this.alpn }
        : undefined;
    return { hostname: this.host, port: this.port, ...(tls ? { tls } : {}) };
  }

  /** When a connection made now stops being usable for our side: the SVID it presents expires. */
  svidUntil(): number {
    return this.o.spiffe ? this.o.spiffe.source.getX509Svid().notAfter.getTime() : Number.POSITIVE_INFINITY;
  }

  /**
   * Checks a connection once it is open (plaintext) or its handshake is done (TLS); throws when the
   * target may not be used: an SvcError when the SPIFFE check refused it.
   */
  check(socket: Socket<unknown>): CheckedTarget {
    let verified: VerifiedUpstream | undefined;
    let validUntil = this.svidUntil();
    if (this.o.spiffe) {
      const peer = verifyBunPeer(socket, "client", this.o.spiffe.source, this.o.spiffe.authorize);
      verified = { id: peer.id, chain: peer.chain.map((c) => c.der) };
      validUntil = Math.min(validUntil, peer.notAfter.getTime());
    } else if (this.tls && !socket.authorized) {
      const error = socket.getAuthorizationError() as (Error & { code?: string }) | null;
      throw new Error(
        `TLS certificate verification failed (${error?.code ?? error?.message ?? "not authorized"})`,
      );
    }
    if (this.tls && this.o.alpn && socket.alpnProtocol !== this.o.alpn)
      throw new Error(`the target did not agree to ${this.o.alpn} in the TLS handshake (ALPN)`);
    return { verified, validUntil };
  }

  close(): void {
    this.spiffeTls?.close();
  }
}

/** A target connection that closed before it was ready, as node's sockets report it. */
export function closedEarly(): Error {
  return Object.assign(new Error("socket hang up"), { code: "ECONNRESET" });
}
