/**
 * SPIFFE mTLS over node:tls. The TLS stack only carries certificates (rejectUnauthorized is off so that
 * no hostname or WebPKI rule applies); authenticatePeer then verifies the chain against the peer's trust
 * domain bundle and applies the authorizer before a byte of application data moves. Each new handshake
 * uses the source's current SVID; established connections are untouched by rotation.
 */
import tls from "node:tls";
import { SvcError } from "../errors.ts";
import type { Authorizer } from "../spiffe/authorizer.ts";
import type { SvidSource } from "../spiffe/x509-source.ts";
import type { VerifiedPeer } from "../spiffe/x509svid.ts";
import type { KeyLog } from "./keylog.ts";
import { authenticatePeer } from "./peer.ts";

export interface MtlsPolicy {
  source: SvidSource;
  authorize: Authorizer;
  keylog?: KeyLog;
  /** A caller that has not completed the TLS handshake by then is disconnected (server side). */
  handshakeTimeoutMs?: number;
}

export const MIN_VERSION = "TLSv1.2";

function credentials(source: SvidSource): { cert: string; key: string } {
  const svid = source.getX509Svid();
  return { cert: svid.certPem, key: svid.keyPem };
}

export interface MtlsServer {
  server: tls.Server;
  close(): Promise<void>;
}

export interface MtlsServerHandlers {
  onConnection(socket: tls.TLSSocket, peer: VerifiedPeer): void;
  /** A peer that completed the handshake but failed SPIFFE verification or authorization. */
  onReject?(error: SvcError, socket: tls.TLSSocket): void;
  alpn?: string[];
  /** Keep the socket writable after the peer half-closes (byte relays). */
  allowHalfOpen?: boolean;
}

export function createMtlsServer(policy: MtlsPolicy, handlers: MtlsServerHandlers): MtlsServer {
  const server = tls.createServer({
    ...mtlsServerOptions(policy, handlers.alpn),
    ...(handlers.allowHalfOpen ? { allowHalfOpen: true } : {}),
  });
  const detach = attachSpiffeAuth(server, policy, handlers);
  return {
    server,
    close: () =>
      new Promise((resolve) => {
        detach();
        server.close(() => resolve());
      }),
  };
}

/** Options for any TLS server (node:tls, node:https, node:http2) that authenticates SPIFFE peers. */
export function mtlsServerOptions(policy: MtlsPolicy, alpn?: string[]): tls.TlsOptions {
  return {
    ...credentials(policy.source),
    requestCert: true,
    rejectUnauthorized: false,
    minVersion: MIN_VERSION,
    ...(policy.handshakeTimeoutMs ? { handshakeTimeout: policy.handshakeTimeoutMs } : {}),
    ...(alpn ? { ALPNProtocols: alpn } : {}),
  };
}

const verifiedPeers = new WeakMap<tls.TLSSocket, VerifiedPeer>();

/** The authenticated peer of a socket accepted by a server with attachSpiffeAuth. */
export function peerOf(socket: unknown): VerifiedPeer | undefined {
  return verifiedPeers.get(socket as tls.TLSSocket);
}

/**
 * Makes a TLS server authenticate every client the SPIFFE way before it is handed on: unverified or
 * unauthorized sockets are destroyed (onReject says why), and the server's certificate follows the
 * source's rotations for new handshakes. Returns a function that detaches from the source.
 */
export function attachSpiffeAuth(
  server: tls.Server,
  policy: MtlsPolicy,
  handlers: Partial<Pick<MtlsServerHandlers, "onConnection" | "onReject">>,
): () => void {
  const unsubscribe = policy.source.onUpdate(() => server.setSecureContext(credentials(policy.source)));
  if (policy.keylog) server.on("keylog", (line) => policy.keylog?.write(line));
  // Registered first, so that the socket is refused before any request handler sees it.
  server.prependListener("secureConnection", (socket: tls.TLSSocket) => {
    try {
      const peer = authenticatePeer(socket, policy.source, policy.authorize);
      verifiedPeers.set(socket, peer);
      handlers.onConnection?.(socket, peer);
    } catch (e) {
      socket.destroy();
      handlers.onReject?.(asSvcError(e), socket);
    }
  });
  // A failed or timed-out handshake: Bun reports it here but leaves the socket open, so close it.
  server.on("tlsClientError", (e, socket) => {
    handlers.onReject?.(new SvcError("untrusted_peer", `TLS handshake failed: ${e.message}`), socket);
    socket?.destroy();
  });
  return unsubscribe;
}

function asSvcError(e: unknown): SvcError {
  return e instanceof SvcError ? e : new SvcError("untrusted_peer", (e as Error).message);
}

export interface MtlsConnectOptions {
  host: string;
  port: number;
  policy: MtlsPolicy;
  servername?: string;
  alpn?: string[];
  timeoutMs?: number;
  /** Keep the socket writable after the peer half-closes (byte relays). */
  allowHalfOpen?: boolean;
}

/** Connects, authenticates the server, and resolves only for an authorized peer. */
export function connectMtls(o: MtlsConnectOptions): Promise<{ socket: tls.TLSSocket; peer: VerifiedPeer }> {
  return new Promise((resolve, reject) => {
    let creds: { cert: string; key: string };
    try {
      creds = credentials(o.policy.source);
    } catch (e) {
      reject(e);
      return;
    }
    const socket = tls.connect({
      host: o.host,
      port: o.port,
      ...creds,
      rejectUnauthorized: false,
      minVersion: MIN_VERSION,
      ...(o.servername ? { servername: o.servername } : {}),
      ...(o.alpn ? { ALPNProtocols: o.alpn } : {}),
      ...(o.allowHalfOpen ? { allowHalfOpen: true } : {}),
    });
    if (o.policy.keylog) socket.on("keylog", (line) => o.policy.keylog?.write(line));
    const timer = setTimeout(() => {
      socket.destroy();
      reject(
        // A peer that stalls is unreachable, not refused: it has shown no certificate to judge.
        new SvcError("network", `TLS handshake with ${o.host}:${o.port} timed out after ${o.timeoutMs} ms`),
      );
    }, o.timeoutMs ?? 10_000);
    socket.once("secureConnect", () => {
      clearTimeout(timer);
      try {
        resolve({ socket, peer: authenticatePeer(socket, o.policy.source, o.policy.authorize) });
      } catch (e) {
        socket.destroy();
        reject(asSvcError(e));
      }
    });
    socket.once("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
}
