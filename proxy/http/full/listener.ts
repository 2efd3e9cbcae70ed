import http, { type IncomingMessage, type ServerResponse } from "node:http";
import http2 from "node:http2";
import https from "node:https";
import net, { type Socket } from "node:net";
import { pipeline, type Readable, Transform } from "node:stream";
import { checkServerIdentity, type TLSSocket } from "node:tls";
import { isSvcError, SvcError } from "../../../lib/errors.ts";
import type { SpiffeId } from "../../../lib/spiffe/id.ts";
import type { VerifiedPeer } from "../../../lib/spiffe/x509svid.ts";
import { createH2Sessions } from "../../../lib/tls/h2-sessions.ts";
import { attachSpiffeAuth, mtlsServerOptions, peerOf } from "../../../lib/tls/mtls.ts";
import { authenticatePeer, presentedChain } from "../../../lib/tls/peer.ts";
import { createUpstreamAgent } from "../../../lib/tls/upstream-agent.ts";
import { verifyPeerChain } from "../../../lib/tls/verified-chains.ts";
import type { ListenerConfig } from "../../config/types.ts";
import { guardDescriptors } from "../../fd-budget.ts";
import {
  callerRefused,
  type ListenerDeps,
  listen,
  listening,
  type RunningListener,
  sourceAuthorizer,
  targetAuthorizer,
} from "../../listener.ts";
import { buildChain } from "../../middleware/chain.ts";
import { requestTimedOut, targetTimedOut } from "../../timeouts.ts";
import { namedBy, REQUEST_ID_HEADER, requestId } from "../headers.ts";
import {
  type Handler,
  isBuffered,
  type ProxyRequest,
  type ProxyResponse,
  proxyAnswer,
  proxyResponse,
  type Upstream,
} from "../types.ts";
import { Connections } from "./connections.ts";
import { forwarder } from "./forward.ts";
import { h2Forwarder } from "./forward-h2.ts";
import { guardSession } from "./h2-guard.ts";

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

  // The target hop: SPIFFE mTLS (client and central modes) or not; HTTP/2 sessions or HTTP/1.1 agents.
  const targetPolicy = l.targetMtls
    ? {
        source: deps.source,
        authorize: targetAuthorizer(l),
        ...(deps.keylog ? { keylog: deps.keylog } : {}),
      }
    : undefined;
  // Who answered on an mTLS upstream connection, verified once per connection.
  const upstreams = new WeakMap<TLSSocket, Upstream>();
  const identify = (socket: TLSSocket) => {
    let u = upstreams.get(socket);
    if (!u) {
      const chain = presentedChain(socket);
      // checkServerIdentity verified this chain moments ago: this is answered from memory.
      u = { id: verifyPeerChain(chain, deps.source).id, chain };
      upstreams.set(socket, u);
    }
    return u;
  };
  let closeTarget: () => void;
  let forward: Handler;
  if (l.http2) {
    const h2 = createH2Sessions(l.target, l.timeouts.handshakeMs, targetPolicy);
    forward = h2Forwarder({ target: l.target, session: h2.session, ...(targetPolicy ? { identify } : {}) });
    closeTarget = () => h2.close();
  } else {
    const upstream = targetPolicy
      ? createUpstreamAgent(targetPolicy, { keepAlive: !l.disableKeepalive })
      : undefined;
    // An ordinary https:// target's certificate must name the configured host, never the caller's Host
    // header (Node takes the name to check from it when the target is an IP address).
    const targetHost = l.target.hostname.replace(/^\[|\]$/g, "");
    const plainAgent =
      l.target.protocol === "https:"
        ? new https.Agent({
            keepAlive: !l.disableKeepalive,
            checkServerIdentity: (_name, cert) => checkServerIdentity(targetHost, cert),
          })
        : new http.Agent({ keepAlive: !l.disableKeepalive });
    const agent = () => upstream?.agent() ?? plainAgent;
    forward = forwarder({ target: l.target, agent, ...(targetPolicy ? { identify } : {}) });
    closeTarget = () => {
      upstream?.close();
      plainAgent.destroy();
    };
  }
  const chain = buildChain(l.middlewares, forward, {
    listener: l,
    ...(deps.notary ? { notary: deps.notary } : {}),
  });

  // Bun's node:http has no headersTimeout: a head trickled in a byte at a time is timed here, as the
  // relay times it (408 after timeouts.read from its first bytes).
  const headTimedOut = (key: object) => {
    const socket = key as Socket;
    const t = requestTimedOut(l.timeouts);
    socket.end(proxyAnswer(t.status, t.message, true));
    setTimeout(() => socket.destroy(), 1_000).unref();
  };
  const connections = new Connections(l.timeouts.idleMs, () => events?.connection(), {
    ms: l.timeouts.readMs,
    timedOut: headTimedOut,
  });
  const trackSocket = (socket: Socket) => {
    connections.open(
      socket,
      () => socket.destroy(),
      (cleanup) => socket.once("close", cleanup),
    );
    socket.on("data", () => connections.bytesArrived(socket));
  };
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
      if (raw) setTimeout(() => raw.resetAndDestroy(), GOAWAY_GRACE_MS).unref();
    });
    guardSession(session, (reason, detail) => {
      events?.http2Ended(reason);
      log.warn("caller HTTP/2 connection ended", { reason, detail, remote });
    });
  };
  // The peer of an HTTP/2 session, verified once from its TLS connection (req.socket is a proxy object).
  const sessionPeers = new WeakMap<object, VerifiedPeer | undefined>();
  const peerFor = (req: IncomingMessage, session: object | undefined): VerifiedPeer | undefined => {
    if (!mtlsIn) return undefined;
    if (!session) return peerOf(req.socket);
    if (!sessionPeers.has(session))
      sessionPeers.set(session, authenticatePeer(req.socket as TLSSocket, deps.source, authorizeSource));
    return sessionPeers.get(session);
  };
  // A request that arrives after the caller's certificate expired is not served: its connection is closed
  // (HTTP/1.1) or the stream refused and the session closed (HTTP/2), as a server closes an idle
  // connection, and the caller retries over a new handshake.
  const expired = (peer: VerifiedPeer | undefined) =>
    peer !== undefined && Date.now() > peer.notAfter.getTime();

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const started = performance.now();
    const socket = req.socket;
    const session =
      req.httpVersionMajor === 2
        ? (req as unknown as { stream: { session: object } }).stream.session
        : undefined;
    const connection = session ?? socket;
    connections.requestStarted(connection);
    // A body not read to its end (an answer before it) leaves the connection to the idle timeout only.
    if (req.complete) connections.requestRead(connection);
    else req.once("end", () => connections.requestRead(connection));
    let verified: VerifiedPeer | undefined;
    try {
      verified = peerFor(req, session);
    } catch (e) {
      const refusal = isSvcError(e) ? e : new SvcError("untrusted_peer", (e as Error).message);
      callerRefused({ events, log }, refusal, socket.remoteAddress);
      res.once("close", () => connections.requestEnded(connection));
      send(res, proxyResponse(403, `caller identity not accepted: ${(e as Error).message}`));
      return;
    }
    if (expired(verified)) {
      log.info("caller certificate expired; connection closed", { peer: verified?.id.uri });
      connections.requestEnded(connection);
      if (session) {
        (req as unknown as { stream: http2.ServerHttp2Stream }).stream.close(
          http2.constants.NGHTTP2_REFUSED_STREAM,
        );
        (session as http2.Http2Session).close();
      } else socket.destroy();
      return;
    }
    const peer: SpiffeId | undefined = verified?.id;
    const id = requestId(req.headers[REQUEST_ID_HEADER] as string | undefined, namedBy(req.headers));
    const reqLog = log.with({ request_id: id, ...(peer ? { peer: peer.uri } : {}) });
    const controller = new AbortController();
    let bytesIn = 0;
    const bytesOut = { n: 0 };
    // A body is counted in a Transform, not a "data" listener: that would start it flowing before a
    // middleware that awaits has passed the request on, and the bytes would be lost. A request that
    // cannot have a body skips it (about 14% of a hop's throughput, measured).
    const mayHaveBody =
      req.httpVersionMajor === 2 ||
      req.headers["transfer-encoding"] !== undefined ||
      Number(req.headers["content-length"] ?? 0) > 0;
    const body = mayHaveBody
      ? req.pipe(
          new Transform({
            transform(chunk: Buffer, _encoding, done) {
              bytesIn += chunk.length;
              done(null, chunk);
            },
          }),
        )
      : req;
    let timedOut: "read" | "write" | undefined;

    // read: the whole request, body included; write: from the end of the request to the end of the response.
    const readTimer = setTimeout(() => {
      timedOut = "read";
      controller.abort();
      // The rest of a half-read request cannot be told from the next request: the connection ends.
      res.once("finish", () => socket.destroy());
      const t = requestTimedOut(l.timeouts);
      const timeout = proxyResponse(t.status, t.message);
      timeout.headers.connection = "close";
      if (!res.headersSent) send(res, timeout);
      else res.destroy();
    }, l.timeouts.readMs);
    let writeTimer: ReturnType<typeof setTimeout> | undefined;
    const startWriteTimer = () => {
      clearTimeout(readTimer);
      writeTimer = setTimeout(() => {
        timedOut = "write";
        controller.abort();
        const t = targetTimedOut(l.timeouts, l.target);
        if (!res.headersSent) send(res, proxyResponse(t.status, t.message));
        else res.destroy();
      }, l.timeouts.writeMs);
    };
    if (req.complete) startWriteTimer();
    else req.once("end", startWriteTimer);
    res.once("close", () => {
      clearTimeout(readTimer);
      clearTimeout(writeTimer);
      if (!res.writableFinished) controller.abort();
      connections.requestEnded(connection);
      const seconds = (performance.now() - started) / 1000;
      events?.request(res.statusCode, seconds, bytesIn, bytesOut.n);
      reqLog.debug("request", { method: req.method, path: req.url, status: res.statusCode, seconds });
    });

    // The request's fields as the caller sent them: the forwarder makes the one copy that goes upstream,
    // with the proxy's own fields (headers.ts requestFields).
    const headers = req.headers;
    const preq: ProxyRequest = {
      id,
      listener: l.name,
      method: req.method ?? "GET",
      path: req.url ?? "/",
      headers,
      body,
      peer,
      remoteAddress: socket.remoteAddress ?? "",
      log: reqLog,
      signal: controller.signal,
    };
    let response: ProxyResponse;
    try {
      response = await chain(preq);
    } catch (e) {
      reqLog.error("middleware failed", { error: e as Error });
      response = proxyResponse(500, "internal error in a middleware");
    }
    if (timedOut || res.headersSent || res.destroyed) {
      if (!isBuffered(response.body)) response.body.destroy();
      return;
    }
    if (response.failure) {
      const reason = String(response.body).trim();
      reqLog.warn("upstream failure", { status: response.status, failure: response.failure, reason });
      if (response.failure === "target-refused")
        events?.denied("target", response.failureCode ?? "unauthorized_peer");
    }
    // A response made without reading the whole request body (a refusal): the rest is read and dropped,
    // or the caller, still sending, would not see the response on this connection.
    if (!req.complete && !body.destroyed) body.resume();
    send(res, response, bytesOut, (e) =>
      reqLog.warn("upstream failure", { failure: "response-interrupted", reason: e.message }),
    );
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
  server.on("error", (e) => log.error("listener error", { error: e.message }));
  // Past the descriptor budget a new caller is closed at once: accepting would fail, and the runtime
  // would retry the listening socket without end (fd-budget.ts).
  guardDescriptors(server, log);

  const port = await listen(server, l);
  listening(log, l, port, "full");

  return {
    port,
    async close(drainMs) {
      server.close();
      detach();
      await connections.drain(drainMs);
      closeTarget();
    },
  };
}

/** HTTP/2's connection preface starts with these bytes; no HTTP/1.1 request line does. */
const PREFACE = Buffer.from("PRI * HTTP/2.0");

/**
 * Reads until the first bytes tell HTTP/2's preface from HTTP/1.1, puts them back, and says which. A
 * caller that sends nothing within `timeoutMs` is disconnected.
 */
function sniff(socket: net.Socket, timeoutMs: number, then: (h2: boolean) => void): void {
  let seen = Buffer.alloc(0);
  const timer = setTimeout(() => socket.destroy(), timeoutMs);
  socket.once("close", () => clearTimeout(timer));
  const onData = (chunk: Buffer) => {
    seen = Buffer.concat([seen, chunk]);
    const n = Math.min(seen.length, PREFACE.length);
    const h2 = seen.subarray(0, n).equals(PREFACE.subarray(0, n));
    if (h2 && n < PREFACE.length) return;
    clearTimeout(timer);
    socket.off("data", onData);
    socket.pause();
    socket.unshift(seen);
    then(h2);
    socket.resume();
  };
  socket.on("data", onData);
  socket.once("error", () => socket.destroy());
}

/**
 * Writes a response. A streamed body that fails half way (the target reset, its certificate expired) ends
 * the caller's connection (HTTP/1.1) or stream (HTTP/2) at once: the caller sees the response cut short
 * instead of waiting for bytes that will never come.
 */
function send(
  res: ServerResponse,
  r: ProxyResponse,
  counter?: { n: number },
  onBroken?: (e: Error) => void,
): void {
  res.writeHead(r.status, r.headers);
  // Trailers reach an HTTP/2 caller (gRPC's status); HTTP/1.1 callers are not sent any.
  if (res.req.httpVersionMajor === 2) r.trailers?.((t) => res.addTrailers(t));
  if (isBuffered(r.body)) {
    if (counter) counter.n += typeof r.body === "string" ? Buffer.byteLength(r.body) : r.body.length;
    res.end(r.body);
  } else {
    if (counter) {
      r.body.on("data", (chunk: Buffer) => {
        counter.n += chunk.length;
      });
    }
    pipeline(r.body as Readable, res, (e) => {
      if (!e) return;
      res.destroy();
      onBroken?.(e);
    });
  }
}
