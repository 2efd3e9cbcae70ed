import http, { type IncomingMessage, type ServerResponse } from "node:http";
import http2 from "node:http2";
import net, { type Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { TLSSocket } from "node:tls";
import type { VerifiedPeer } from "../../../lib/spiffe/x509svid.ts";
import { attachSpiffeAuth, mtlsServerOptions, peerOf } from "../../../lib/tls/mtls.ts";
import { authenticatePeer } from "../../../lib/tls/peer.ts";
import type { ListenerConfig } from "../../config/types.ts";
import {
  callerRefused,
  type ListenerDeps,
  listen,
  type RunningListener,
  sourceAuthorizer,
} from "../../listener.ts";
import type { Logger } from "../../log.ts";
import { buildChain } from "../../middleware/chain.ts";
import { requestTimedOut } from "../../timeouts.ts";
import { cancellationReport } from "../cancelled.ts";
import { proxyAnswer } from "../types.ts";
import { Connections } from "./connections.ts";
import { type ExchangeContext, serveExchange } from "./exchange.ts";
import { guardSession } from "./h2-guard.ts";
import { sniff } from "./sniff.ts";
import { openTarget } from "./target.ts";

// Concurrent streams per HTTP/2 caller connection, announced in SETTINGS (the common default).
const MAX_STREAMS = 100;
// How long the connection of an ended HTTP/2 session stays open for its GOAWAY to be read.
const GOAWAY_GRACE_MS = 1000;

/**
 * One HTTP listener (docs/proxy-http.md): client mode takes plaintext and calls the target over SPIFFE
 * mTLS; server mode authenticates callers with SPIFFE mTLS and calls the target in plaintext (or ordinary
 * HTTPS); central does mTLS on both sides. Server and central tell the target who called in Svc-Peer-ID.
 */
export async function startHttpListener(l: ListenerConfig, deps: ListenerDeps): Promise<RunningListener> {
  const log = deps.log.with({ listener: l.name });
  const events = deps.events;
  const mtlsIn = l.callerMtls;
  const authorizeSource = sourceAuthorizer(l);
  // The peer of an HTTP/2 session, verified once from its TLS connection (req.socket is a proxy object).
  const sessionPeers = new WeakMap<object, VerifiedPeer | undefined>();
  const peerFor = (req: IncomingMessage, session: object | undefined): VerifiedPeer | undefined => {
    if (!mtlsIn) return undefined;
    if (!session) return peerOf(req.socket);
    if (!sessionPeers.has(session))
      sessionPeers.set(session, authenticatePeer(req.socket as TLSSocket, deps.source, authorizeSource));
    return sessionPeers.get(session);
  };
  const { target, connections, trackSocket, handle } = fullPath(l, deps, log, peerFor);

  // The connections under HTTP/2 sessions, by remote address and port: a session hides its own.
  const h2Sockets = new Map<string, Socket>();
  const connectionKey = (s: { remoteAddress?: string; remotePort?: number } | undefined) =>
    `${s?.remoteAddress}|${s?.remotePort}`;
  const holdH2Socket = (socket: Socket) => {
    const key = connectionKey(socket);
    h2Sockets.set(key, socket);
    socket.once("close", () => {
      if (h2Sockets.get(key) === socket) h2Sockets.delete(key);
    });
  };
  // An HTTP/2 connection is accounted as its session (HTTP/2 callers of mTLS and h2c listeners). A session
  // that fails ends with its streams (each answers or is reset); the listener goes on.
  const trackSession = (session: http2.Http2Session) => {
    connections.open(
      session,
      () => session.destroy(),
      (cleanup) => session.once("close", cleanup),
    );
    session.on("error", (e: Error) => log.debug("caller HTTP/2 session failed", { error: e.message }));
    const remote = session.socket?.remoteAddress;
    // The connection under this session, found once: the session event follows its connection at once.
    const raw = h2Sockets.get(connectionKey(session.socket));
    // A session ended by the runtime (a flood over TLS) or by us (abuse, idle, drain, an expired
    // certificate on an h2c connection handed over by the sniffing) may leave its connection open and
    // unread: it is reset whatever ended the session, once a GOAWAY has had its chance to reach the caller.
    session.once("close", () => {
      if (raw) setTimeout(() => closeNow(raw), GOAWAY_GRACE_MS).unref();
    });
    guardSession(session, (reason, detail) => {
      events?.http2Ended(reason);
      log.warn("caller HTTP/2 connection ended", { reason, detail, remote });
    });
  };
  let server: net.Server;
  let detach = () => {};
  if (mtlsIn) {
    const policy = {
      source: deps.source,
      authorize: authorizeSource,
      handshakeTimeoutMs: l.timeouts.handshakeMs,
      ...(deps.keylog ? { keylog: deps.keylog } : {}),
    };
    // HTTP/1.1 and HTTP/2 callers: an HTTP/2 connection is accounted as its session.
    const secure = http2.createSecureServer({
      ...mtlsServerOptions(policy, ["h2", "http/1.1"]),
      allowHTTP1: true,
      settings: { maxConcurrentStreams: MAX_STREAMS },
    });
    secure.on("session", trackSession);
    detach = attachSpiffeAuth(secure, policy, {
      onConnection: (socket) => {
        if (socket.alpnProtocol !== "h2") trackSocket(socket);
        else holdH2Socket(socket);
      },
      onReject: (e, socket) => callerRefused({ events, log }, e, socket?.remoteAddress),
    });
    secure.on(
      "request",
      (req, res) => void handle(req as unknown as IncomingMessage, res as unknown as ServerResponse),
    );
    server = secure;
  } else {
    const plain = http.createServer(
      { keepAliveTimeout: l.timeouts.idleMs },
      (req, res) => void handle(req, res),
    );
    plain.on("connection", trackSocket);
    server = plain;
    if (l.http2) {
      // HTTP/2 with prior knowledge (h2c) and HTTP/1.1 on one port: a connection that opens with the
      // HTTP/2 preface goes to the HTTP/2 server, any other to the HTTP/1.1 one.
      const h2c = http2.createServer({ settings: { maxConcurrentStreams: MAX_STREAMS } });
      h2c.on("session", trackSession);
      h2c.on(
        "request",
        (req, res) => void handle(req as unknown as IncomingMessage, res as unknown as ServerResponse),
      );
      server = net.createServer((socket) =>
        sniff(socket, l.timeouts.readMs, (h2) => {
          if (h2) holdH2Socket(socket);
          (h2 ? h2c : plain).emit("connection", socket);
        }),
      );
    }
  }
  const port = await listen(server, l, log, "full");

  return {
    port,
    async close(drainMs) {
      server.close();
      detach();
      await connections.drain(drainMs);
      target.close();
    },
  };
}

/**
 * Closes a caller's connection at once, whatever it has not read. Under an HTTP/2 session over TLS, Bun
 * (1.4.5) keeps the connection open after the session ends while answers the caller never read are
 * queued: destroy() and resetAndDestroy() mark the socket destroyed but leave the connection to the
 * caller, who can hold it (and its descriptor) for as long as it likes (a PING flood that does not read
 * its PING ACKs, tests/integration/proxy-http2-floods.test.ts). The native socket's terminate() ends it.
 */
function closeNow(socket: Socket): void {
  (socket as unknown as { _handle?: { terminate?(): void } })._handle?.terminate?.();
  socket.resetAndDestroy();
}

/**
 * What every connection of the full path shares: the target, the middleware chain, connection accounting
 * (idle and head timeouts) and the exchange handler. `peerFor` says who called; `handedOver`: the
 * connections come from the relay, which counted them.
 */
function fullPath(
  l: ListenerConfig,
  deps: ListenerDeps,
  log: Logger,
  peerFor: ExchangeContext["peerFor"],
  handedOver = false,
) {
  const events = deps.events;
  const target = openTarget(l, deps);
  const chain = buildChain(l.middlewares, target.forward, {
    listener: l,
    ...(deps.notary ? { notary: deps.notary } : {}),
    ...(deps.witness ? { witness: deps.witness } : {}),
    ...(events ? { events } : {}),
  });

  // Bun's node:http has no headersTimeout: a head trickled in a byte at a time is timed here, as the
  // relay times it (408 after timeouts.read from its first bytes).
  const headTimedOut = (key: object) => {
    const socket = key as Socket;
    const t = requestTimedOut(l.timeouts);
    socket.end(proxyAnswer(t.status, t.message, true));
    setTimeout(() => socket.destroy(), 1_000).unref();
  };
  // A connection handed over by the relay was counted when the relay accepted it.
  const connections = new Connections(
    l.timeouts.idleMs,
    () => (handedOver ? undefined : events?.connection()),
    {
      ms: l.timeouts.readMs,
      timedOut: headTimedOut,
    },
  );
  const trackSocket = (socket: Socket) => {
    connections.open(
      socket,
      () => socket.destroy(),
      (cleanup) => socket.once("close", cleanup),
    );
    socket.on("data", () => connections.bytesArrived(socket));
  };
  const exchanges: ExchangeContext = {
    l,
    log,
    events,
    connections,
    chain,
    peerFor,
    cancelled: cancellationReport(log),
  };
  const handle = (req: IncomingMessage, res: ServerResponse) => serveExchange(exchanges, req, res);
  return { target, connections, trackSocket, handle };
}

/** A caller connection the HTTP/2 relay hands to the full path: its bytes, its verified peer. */
export type HandedOver = Duplex & { remoteAddress: string };

/**
 * The full path's HTTP/1.1 server for the HTTP/1.1 callers of a relay listener with connection.http2,
 * whose target speaks HTTP/2 (docs/proxy-http.md, "Which path"): the relay accepts the connection and
 * verifies the caller, then hands its bytes over as a stream.
 */
export function startHandover(
  l: ListenerConfig,
  deps: ListenerDeps,
): { serve(conn: HandedOver, peer: VerifiedPeer | undefined): void; close(drainMs: number): Promise<void> } {
  const log = deps.log.with({ listener: l.name });
  const peers = new WeakMap<object, VerifiedPeer>();
  const { target, connections, trackSocket, handle } = fullPath(
    l,
    deps,
    log,
    (req) => peers.get(req.socket),
    true,
  );
  const plain = http.createServer(
    { keepAliveTimeout: l.timeouts.idleMs },
    (req, res) => void handle(req, res),
  );
  return {
    serve(conn, peer) {
      if (peer) peers.set(conn, peer);
      trackSocket(conn as unknown as Socket);
      plain.emit("connection", conn);
    },
    async close(drainMs) {
      await connections.drain(drainMs);
      target.close();
    },
  };
}
