import type { Socket } from "bun";
import type { VerifiedPeer } from "../../../lib/spiffe/x509svid.ts";
import { callerRefused } from "../../listener.ts";
import { handshakeTimedOut, requestTimedOut, type Stage, stageMs, targetTimedOut } from "../../timeouts.ts";
import { countRefusal, upstreamFailure } from "../failure.ts";
import { REQUEST_ID_HEADER, requestId } from "../headers.ts";
import { proxyAnswer } from "../types.ts";
import { type FramerEvent, RequestFramer, type RequestHead } from "../wire/request-framer.ts";
import type { ResponseHead } from "../wire/response-framer.ts";
import { CONTENT_LENGTH, type MessageSink } from "../wire/wire.ts";
import type { RelayContext } from "./context.ts";
import {
  type BodyOut,
  chunkSize,
  LAST_CHUNK,
  namedByConnection,
  type RequestAdditions,
  requestHead,
  responseHead,
} from "./head.ts";
import { HIGH_WATER, Outbox } from "./outbox.ts";
import type { UpstreamConn, UpstreamOwner } from "./upstream.ts";

const END: FramerEvent = { type: "end" };
const NO_BODY: BodyOut = { kind: "none" };
const CHUNKED: BodyOut = { kind: "chunked" };
const HEAD_WEIGHT = 1024;
const CRLF = Buffer.from("\r\n", "latin1");
const LAST_CHUNK_BYTES = Buffer.from(LAST_CHUNK, "latin1");

interface Exchange {
  head: RequestHead;
  id: string;
  started: number;
  bytesIn: number;
  bytesOut: number;
  /** The caller wants the connection kept after this exchange. */
  keepAlive: boolean;
  headBytes: Uint8Array;
  requestBody: BodyOut;
  requestDone: boolean;
  upstream: UpstreamConn | undefined;
  /** What was to be sent before the upstream connection was ready. */
  pending: Uint8Array[] | undefined;
  pendingBytes: number;
  responseStarted: boolean;
  status: number;
  /** The response body is re-framed as chunked for the caller. */
  rechunk: boolean;
  /** The connection closes after this response (the caller asked, or the body runs to the close). */
  closeAfter: boolean;
  /** The upstream connection can serve another exchange afterwards. */
  reusable: boolean;
  retried: boolean;
}

/**
 * One caller connection of a relay listener. Requests are framed as they arrive and served one at a
 * time, in order: the head is rewritten and sent with the body as it comes, then the response head is
 * rewritten and the response body relayed, then the next request (pipelined ones wait, framed, in
 * `queue`). Body bytes are never buffered whole; when a side cannot take more, the other side is paused.
 *
 * One deadline per connection, checked by the listener's sweep, for the stage it is in
 * (proxy/timeouts.ts): the handshake within timeouts.handshake, each request (head and body) within
 * timeouts.read, each response within timeouts.write of the end of its request, and an idle connection
 * is closed after timeouts.idle.
 */
export class CallerConn implements UpstreamOwner {
  readonly out: Outbox;
  private readonly framer = new RequestFramer();
  private readonly queue: FramerEvent[] = [];
  private queuedBytes = 0;
  private x: Exchange | undefined;
  phase: Stage;
  deadline: number;
  peer: VerifiedPeer | undefined;
  closed = false;
  private closing = false;
  private paused = false;

  constructor(
    readonly socket: Socket<CallerConn>,
    private readonly ctx: RelayContext,
    tls: boolean,
  ) {
    this.out = new Outbox(socket as Socket<unknown>);
    this.phase = tls ? "handshake" : "idle";
    this.deadline = Date.now() + stageMs(ctx.timeouts, this.phase);
  }

  /** True while no request is in progress, so that a drain may close the connection now. */
  get idle(): boolean {
    return this.x === undefined && this.queue.length === 0 && this.framer.buffered === 0;
  }

  /** What the relay adds to each request head: the same for every request of the connection but the id. */
  private added: RequestAdditions | undefined;

  private additions(requestId: string | undefined): RequestAdditions {
    this.added ??= { peer: this.peer?.id.uri, requestId, remoteAddress: this.socket.remoteAddress };
    this.added.requestId = requestId;
    return this.added;
  }

  /** When the caller's verified certificate chain stops being valid (mTLS callers). */
  private peerUntil = Number.POSITIVE_INFINITY;

  /** The handshake passed (mTLS callers) and the peer was verified. */
  accepted(peer: VerifiedPeer | undefined): void {
    this.peer = peer;
    if (peer) this.peerUntil = peer.notAfter.getTime();
    this.setPhase("idle");
  }

  /** The caller's certificate has expired: no new request is served on this connection. */
  private get peerExpired(): boolean {
    return this.peerUntil !== Number.POSITIVE_INFINITY && Date.now() > this.peerUntil;
  }

  received(data: Uint8Array): void {
    if (this.closing || this.phase === "handshake") return;
    if (this.phase === "idle") this.setPhase("read");
    this.framer.feed(data, this.requests);
    this.pump();
  }

  /**
   * What the request framer completes is served at once when the connection is free for it (no request
   * waiting for its response, nothing queued before it); otherwise it waits in `queue`.
   */
  private readonly requests: MessageSink<RequestHead> = {
    head: (head) => {
      if (this.closing) return;
      if (!this.x && this.queue.length === 0) this.start(head);
      else this.enqueue({ type: "head", head });
    },
    body: (src, start, end) => {
      if (this.closing) return;
      const x = this.x;
      const data = src.subarray(start, end);
      if (x && !x.requestDone && this.queue.length === 0) this.forwardBody(x, data);
      else this.enqueue({ type: "body", data });
    },
    end: () => {
      if (this.closing) return;
      const x = this.x;
      if (x && !x.requestDone && this.queue.length === 0) this.requestEnded(x);
      else this.enqueue(END);
    },
    error: (status, reason) => {
      if (this.closing) return;
      // An error after a complete request concerns the next one, which waits for the current response.
      if (this.queue.length === 0 && !this.x?.requestDone) this.requestError(status, reason);
      else this.enqueue({ type: "error", status, reason });
    },
  };

  private enqueue(e: FramerEvent): void {
    this.queue.push(e);
    this.queuedBytes += e.type === "body" ? e.data.length : HEAD_WEIGHT;
  }

  /** Serves queued events for as long as the current exchange can take them, then writes. */
  private pump(): void {
    while (this.queue.length > 0 && !this.closing) {
      const x = this.x;
      if (x?.requestDone) break; // the next request waits for this response
      const e = this.queue.shift() as FramerEvent;
      this.queuedBytes -= e.type === "body" ? e.data.length : HEAD_WEIGHT;
      if (e.type === "head") {
        if (!x) this.start(e.head);
      } else if (e.type === "body") {
        if (x) this.forwardBody(x, e.data);
      } else if (e.type === "end") {
        if (x) this.requestEnded(x);
      } else if (e.type === "error") this.requestError(e.status, e.reason);
    }
    this.x?.upstream?.out?.flush();
    this.flow();
  }

  private forwardBody(x: Exchange, data: Uint8Array): void {
    if (x.requestBody.kind === "chunked")
      this.toUpstream(x, [Buffer.from(chunkSize(data.length), "latin1"), data, CRLF], data.length);
    else this.toUpstream(x, [data], data.length);
  }

  private requestEnded(x: Exchange): void {
    if (x.requestBody.kind === "chunked") this.toUpstream(x, [LAST_CHUNK_BYTES], 0);
    x.requestDone = true;
    if (!x.responseStarted) this.setPhase("write");
  }

  /** A malformed request: refused; one that broke off in its body also loses what was sent upstream. */
  private requestError(status: number, reason: string): void {
    const x = this.x;
    if (!x) {
      this.refuse(status, reason);
      return;
    }
    this.dropUpstream(x);
    if (x.responseStarted) this.terminate();
    else this.answer(x, status, reason, true);
  }

  private start(head: RequestHead): void {
    if (this.peerExpired) {
      // As an idle connection closed by the server: the caller retries on a new connection, whose
      // handshake checks a current certificate.
      this.ctx.log.info("caller certificate expired; connection closed", { peer: this.peer?.id.uri });
      this.terminate();
      return;
    }
    if (head.method === "CONNECT") {
      this.refuse(501, "CONNECT is not supported by this listener");
      return;
    }
    const named = namedByConnection(head.special);
    let callerId: string | undefined;
    for (const [name, value] of head.special) if (name === REQUEST_ID_HEADER) callerId = value;
    const id = requestId(callerId, named);
    const requestBody: BodyOut =
      head.body.kind === "fixed"
        ? { kind: "length", length: head.body.length }
        : head.body.kind === "chunked"
          ? CHUNKED
          : NO_BODY;
    const x: Exchange = {
      head,
      id,
      started: performance.now(),
      bytesIn: 0,
      bytesOut: 0,
      keepAlive: persists(head.version, named),
      headBytes: requestHead(head, named, requestBody, this.additions(id === callerId ? undefined : id)),
      requestBody,
      requestDone: false,
      upstream: undefined,
      pending: undefined,
      pendingBytes: 0,
      responseStarted: false,
      status: 0,
      rechunk: false,
      closeAfter: false,
      reusable: false,
      retried: false,
    };
    this.x = x;
    this.connect(x);
  }

  private connect(x: Exchange, flush = false): void {
    const conn = this.ctx.pool.take(this);
    if (conn) {
      x.upstream = conn;
      conn.framer.expect(x.head.method);
      conn.out?.add(x.headBytes);
      if (flush) conn.out?.flush();
      return;
    }
    x.pending = [x.headBytes];
    x.pendingBytes = x.headBytes.length;
    x.upstream = this.ctx.pool.dial(this);
  }

  private toUpstream(x: Exchange, pieces: Uint8Array[], bodyBytes: number): void {
    x.bytesIn += bodyBytes;
    if (x.pending) {
      for (const p of pieces) {
        x.pending.push(p);
        x.pendingBytes += p.length;
      }
    } else for (const p of pieces) x.upstream?.out?.add(p);
  }

  upstreamReady(conn: UpstreamConn): void {
    const x = this.x;
    if (!x || x.upstream !== conn) {
      this.ctx.pool.release(conn, true);
      return;
    }
    conn.framer.expect(x.head.method);
    for (const p of x.pending ?? []) conn.out?.add(p);
    x.pending = undefined;
    x.pendingBytes = 0;
    conn.out?.flush();
    this.flow();
  }

  upstreamFailed(error: Error): void {
    const x = this.x;
    if (!x) return;
    x.upstream = undefined;
    const r = upstreamFailure(this.ctx.target, error);
    countRefusal(this.ctx.events, r);
    this.ctx.log.warn("upstream failure", {
      request_id: x.id,
      status: 502,
      failure: r.failure,
      reason: String(r.body).trim(),
    });
    this.answer(x, 502, String(r.body).slice("svc-proxy: ".length).trim(), !x.requestDone);
  }

  upstreamClosed(reason: string | undefined): void {
    const x = this.x;
    if (!x) return;
    const conn = x.upstream;
    x.upstream = undefined;
    // A pooled connection the upstream closed as we reused it: a request without a body, sent whole,
    // is sent again once on a new connection (as HTTP clients do for idempotent retries).
    if (!x.responseStarted && conn?.reused && !x.retried && x.requestDone && x.requestBody.kind === "none") {
      x.retried = true;
      this.connect(x, true);
      return;
    }
    if (x.responseStarted) {
      this.ctx.log.warn("upstream closed during the response", { request_id: x.id, reason });
      this.terminate();
      return;
    }
    this.upstreamFailed(Object.assign(new Error(reason ?? "socket hang up"), { code: "ECONNRESET" }));
  }

  upstreamDrained(): void {
    this.flow();
  }

  /** What the upstream connection's response framer completes, for the current exchange. */
  readonly responses: MessageSink<ResponseHead> = {
    head: (h) => {
      const x = this.x;
      if (!x || this.closed) return;
      if (h.interim) responseHead(h, NO_BODY, false, this.out);
      // A 101 nobody asked for (the relay never passes Upgrade on): `tunnel` follows and answers 502.
      else if (h.status !== 101) this.respond(x, h);
    },
    body: (src, start, end) => {
      const x = this.x;
      if (!x || this.closed) return;
      x.bytesOut += end - start;
      if (x.rechunk) this.out.addText(chunkSize(end - start));
      this.out.addRange(src, start, end);
      if (x.rechunk) this.out.addText("\r\n");
    },
    end: () => {
      const x = this.x;
      if (!x || this.closed) return;
      if (x.rechunk) this.out.addText(LAST_CHUNK);
      this.finish(x);
    },
    error: (_status, reason) => {
      const x = this.x;
      if (!x || this.closed) return;
      this.dropUpstream(x);
      this.badUpstream(x, reason);
    },
    tunnel: () => {
      const x = this.x;
      if (!x || this.closed) return;
      this.dropUpstream(x);
      this.badUpstream(x, "the upstream switched protocols, which an HTTP listener does not carry");
    },
  };

  /** After each batch of bytes from the upstream: what was framed is written in one write. */
  upstreamBatchEnd(): void {
    this.out.flush();
    this.flow();
  }

  private respond(x: Exchange, h: ResponseHead): void {
    x.responseStarted = true;
    x.status = h.status;
    const upstreamNamed = namedByConnection(h.special);
    x.reusable = h.body.kind !== "close" && persists(h.version, upstreamNamed);
    let body: BodyOut;
    if (h.body.kind === "fixed") body = { kind: "length", length: h.body.length };
    else if (h.body.kind === "chunked" || h.body.kind === "close") {
      // A chunked body, or one that runs to the upstream's close: chunked for an HTTP/1.1 caller; an
      // HTTP/1.0 caller cannot read chunks, so its body runs to the close of its connection.
      if (x.head.version === "HTTP/1.1") body = CHUNKED;
      else {
        body = NO_BODY;
        x.closeAfter = true;
      }
    } else body = declaredLength(x, h);
    x.rechunk = body.kind === "chunked";
    // The response in flight when the caller's certificate expires is its last: Connection: close.
    if (!x.keepAlive || this.peerExpired) x.closeAfter = true;
    responseHead(h, body, x.closeAfter, this.out);
  }

  /** The upstream broke the protocol: 502 if nothing was answered yet, else the connection ends. */
  private badUpstream(x: Exchange, reason: string): void {
    this.ctx.log.warn("upstream failure", {
      request_id: x.id,
      status: 502,
      failure: "target-failed",
      reason,
    });
    if (x.responseStarted) this.terminate();
    else this.answer(x, 502, `upstream ${this.ctx.target.origin} failed: ${reason}`, !x.requestDone);
  }

  /** Answers the current exchange from the proxy and ends it. */
  private answer(x: Exchange, status: number, message: string, close: boolean): void {
    x.status = status;
    x.responseStarted = true;
    x.closeAfter ||= close || !x.keepAlive;
    this.out.add(proxyAnswer(status, message, x.closeAfter));
    this.finish(x);
  }

  /** A request that cannot be served (malformed, unsupported): answered, then the connection closes. */
  private refuse(status: number, reason: string): void {
    this.ctx.log.debug("request refused", { status, reason });
    this.ctx.events?.request(status, 0, 0, 0);
    this.out.add(proxyAnswer(status, reason, true));
    this.out.flush();
    this.closeSoon();
  }

  private finish(x: Exchange): void {
    this.out.flush();
    const conn = x.upstream;
    x.upstream = undefined;
    if (conn) this.ctx.pool.release(conn, x.reusable && x.requestDone);
    this.x = undefined;
    const seconds = (performance.now() - x.started) / 1000;
    this.ctx.events?.request(x.status, seconds, x.bytesIn, x.bytesOut);
    if (this.ctx.debug)
      this.ctx.log.debug("request", {
        request_id: x.id,
        method: x.head.method,
        path: x.head.target,
        status: x.status,
        seconds,
        ...(this.peer ? { peer: this.peer.id.uri } : {}),
      });
    if (x.closeAfter) {
      this.closeSoon();
      return;
    }
    this.setPhase(this.queue.length > 0 || this.framer.buffered > 0 ? "read" : "idle");
    this.pump();
  }

  private dropUpstream(x: Exchange): void {
    const conn = x.upstream;
    x.upstream = undefined;
    x.pending = undefined;
    conn?.destroy();
  }

  private setPhase(phase: Stage): void {
    this.phase = phase;
    this.deadline = Date.now() + stageMs(this.ctx.timeouts, phase);
    // An idle connection also ends when the caller's certificate expires.
    if (phase === "idle") this.deadline = Math.min(this.deadline, this.peerUntil);
  }

  /** Called by the sweep once the deadline has passed. */
  expire(): void {
    if (this.closed || this.closing) return;
    const x = this.x;
    switch (this.phase) {
      case "handshake":
        callerRefused(this.ctx, handshakeTimedOut(this.ctx.timeouts), this.socket.remoteAddress);
        this.terminate();
        return;
      case "idle":
        this.closeSoon();
        return;
      case "read": {
        const t = requestTimedOut(this.ctx.timeouts);
        if (x) this.dropUpstream(x);
        if (x?.responseStarted) this.terminate();
        else if (x) this.answer(x, t.status, t.message, true);
        else this.refuse(t.status, t.message);
        return;
      }
      case "write": {
        if (!x) return;
        const t = targetTimedOut(this.ctx.timeouts, this.ctx.target);
        this.dropUpstream(x);
        if (x.responseStarted) this.terminate();
        else this.answer(x, t.status, t.message, false);
        return;
      }
    }
  }

  /** Pauses a side that sends faster than the other side takes. */
  private flow(): void {
    const x = this.x;
    const behind = this.queuedBytes + (x?.pendingBytes ?? 0) + (x?.upstream?.out?.queued ?? 0);
    if (behind > HIGH_WATER && !this.paused) {
      this.paused = true;
      this.socket.pause();
    } else if (behind <= HIGH_WATER && this.paused) {
      this.paused = false;
      this.socket.resume();
    }
    const up = x?.upstream;
    if (up?.socket && up.paused !== this.out.queued > HIGH_WATER) {
      up.paused = !up.paused;
      if (up.paused) up.socket.pause();
      else up.socket.resume();
    }
  }

  drained(): void {
    if (!this.out.drain()) return;
    if (this.closing) this.socket.end();
    else this.flow();
  }

  /** Closes once what was answered has been written. */
  closeSoon(): void {
    this.closing = true;
    this.queue.length = 0;
    this.queuedBytes = 0;
    if (this.x) this.dropUpstream(this.x);
    if (this.out.queued === 0) this.socket.end();
  }

  terminate(): void {
    this.closing = true;
    if (this.x) this.dropUpstream(this.x);
    this.socket.terminate();
  }

  /** The caller's connection closed: an exchange in progress is abandoned. */
  gone(): void {
    this.closed = true;
    const x = this.x;
    if (!x) return;
    this.x = undefined;
    this.dropUpstream(x);
    if (x.responseStarted)
      this.ctx.events?.request(x.status, (performance.now() - x.started) / 1000, x.bytesIn, x.bytesOut);
  }
}

/**
 * Whether a connection stays open after a message (RFC 9112 section 9.3): HTTP/1.1 unless its Connection
 * field says close, HTTP/1.0 only if it says keep-alive. `named`: the field's tokens.
 */
const persists = (version: string, named: ReadonlySet<string>): boolean =>
  version === "HTTP/1.1" ? !named.has("close") : named.has("keep-alive");

/** HEAD, 204 and 304 carry no body; the Content-Length the upstream declared is passed on. */
function declaredLength(x: Exchange, h: ResponseHead): BodyOut {
  if (x.head.method !== "HEAD" && h.status !== 304) return NO_BODY;
  for (const [name, value] of h.special)
    if (name === "content-length" && CONTENT_LENGTH.test(value))
      return { kind: "length", length: Number(value) };
  return NO_BODY;
}
