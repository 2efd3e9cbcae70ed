/**
 * The HTTP/1.1 relay's connections to a listener's target (made and checked as target.ts says). Idle
 * connections are pooled per listener;
 * one connection serves one exchange at a time. A pooled connection is not used again once the upstream
 * closed it, once the certificate it was verified with has expired, or after our SVID rotated.
 */
import type { Socket, SocketHandler } from "bun";
import { SvcError } from "../../../lib/errors.ts";
import type { Upstream as VerifiedUpstream } from "../types.ts";
import { ResponseFramer, type ResponseHead } from "../wire/response-framer.ts";
import type { MessageSink } from "../wire/wire.ts";
import { Outbox } from "./outbox.ts";
import { closedEarly, RelayTarget, type TargetOptions } from "./target.ts";

export interface UpstreamOwner {
  upstreamReady(conn: UpstreamConn): void;
  /** Could not connect, or the upstream was refused at the handshake. */
  upstreamFailed(error: Error): void;
  /** Hears the responses framed on the connection. */
  readonly responses: MessageSink<ResponseHead>;
  /** The bytes received were framed (and the sink has heard what they completed). */
  upstreamBatchEnd(): void;
  /** The connection closed or failed after it was ready; `reason` is the error, if any. */
  upstreamClosed(reason: string | undefined): void;
  upstreamDrained(): void;
}

export class UpstreamConn {
  socket: Socket<UpstreamConn> | undefined;
  out: Outbox | undefined;
  readonly framer = new ResponseFramer();
  owner: UpstreamOwner | undefined;
  ready = false;
  closed = false;
  /** Reading is paused because the caller is not taking the response fast enough. */
  paused = false;
  /** Taken from the pool, so the upstream may have closed it just now. */
  reused = false;
  verified: VerifiedUpstream | undefined;
  /** When the connection stops being usable (ms): the first expiry of the verified peer chain or of the
   * SVID this proxy presented on it, for mTLS upstreams. */
  validUntil = Number.POSITIVE_INFINITY;
  /** The SVID generation this connection was made with; a rotation retires it. */
  generation = 0;
  idleSince = 0;
  lastError: Error | undefined;
  timer: ReturnType<typeof setTimeout> | undefined;

  constructor(readonly pool: UpstreamPool) {}

  destroy(): void {
    this.owner = undefined;
    this.closed = true;
    this.socket?.terminate();
  }
}

const POOL_IDLE_MS = 30_000;
const MAX_IDLE = 256;

export interface UpstreamOptions extends TargetOptions {
  keepAlive: boolean;
  /** How long a connection to the target (and its TLS handshake) may take: the listener's `handshake`. */
  dialMs: number;
}

export class UpstreamPool {
  private idle: UpstreamConn[] = [];
  readonly target: RelayTarget;
  private readonly sweep: ReturnType<typeof setInterval>;

  constructor(private readonly o: UpstreamOptions) {
    // New connections present the new SVID; idle ones made with the old one are closed, and busy ones
    // are not pooled again when their exchange ends (their generation is behind).
    this.target = new RelayTarget(o, () => this.expire(Number.POSITIVE_INFINITY));
    this.sweep = setInterval(() => this.expire(Date.now() - POOL_IDLE_MS), POOL_IDLE_MS / 2);
    this.sweep.unref();
  }

  /** An idle pooled connection, made ready for `owner`, or undefined when a new one must be dialled. */
  take(owner: UpstreamOwner): UpstreamConn | undefined {
    const now = Date.now();
    for (let conn = this.idle.pop(); conn; conn = this.idle.pop()) {
      if (conn.closed) continue;
      // Bytes the target sent after its response (stray, or a response nobody asked for) would be read
      // as the next caller's answer: such a connection is not reused.
      if (conn.validUntil <= now || conn.generation !== this.target.generation || !conn.framer.atRest) {
        conn.destroy();
        continue;
      }
      conn.owner = owner;
      conn.reused = true;
      return conn;
    }
    return undefined;
  }

  /** Connects; `owner` hears upstreamReady or upstreamFailed. */
  dial(owner: UpstreamOwner): UpstreamConn {
    const conn = new UpstreamConn(this);
    conn.owner = owner;
    conn.generation = this.target.generation;
    conn.timer = setTimeout(
      () => this.fail(conn, new SvcError("network", `connect timed out after ${this.o.dialMs} ms`)),
      this.o.dialMs,
    );
    conn.validUntil = this.target.svidUntil();
    Bun.connect<UpstreamConn>({
      ...this.target.connectOptions(),
      data: conn,
      socket: HANDLERS,
    }).catch((e: Error) => this.fail(conn, e));
    return conn;
  }

  /** Back to the pool after a complete exchange, or closed when it cannot be used again. */
  release(conn: UpstreamConn, reusable: boolean): void {
    conn.owner = undefined;
    if (conn.paused) {
      conn.paused = false;
      conn.socket?.resume();
    }
    const stale = conn.generation !== this.target.generation || conn.validUntil <= Date.now();
    if (!reusable || !this.o.keepAlive || conn.closed || stale || this.idle.length >= MAX_IDLE) {
      conn.destroy();
      return;
    }
    conn.idleSince = Date.now();
    this.idle.push(conn);
  }

  close(): void {
    clearInterval(this.sweep);
    this.target.close();
    this.expire(Number.POSITIVE_INFINITY);
  }

  private expire(before: number): void {
    const keep: UpstreamConn[] = [];
    for (const conn of this.idle) {
      if (conn.closed) continue;
      if (conn.idleSince < before) conn.destroy();
      else keep.push(conn);
    }
    this.idle = keep;
  }

  ready(conn: UpstreamConn, socket: Socket<UpstreamConn>): void {
    clearTimeout(conn.timer);
    try {
      const checked = this.target.check(socket as Socket<unknown>);
      conn.verified = checked.verified;
      conn.validUntil = Math.min(conn.validUntil, checked.validUntil);
    } catch (e) {
      this.fail(conn, e as Error);
      return;
    }
    conn.ready = true;
    conn.owner?.upstreamReady(conn);
  }

  fail(conn: UpstreamConn, e: Error): void {
    clearTimeout(conn.timer);
    if (conn.closed) return;
    const owner = conn.owner;
    const wasReady = conn.ready;
    conn.destroy();
    if (!owner) return;
    if (wasReady) owner.upstreamClosed(e.message);
    else owner.upstreamFailed(e);
  }
}

const HANDLERS: SocketHandler<UpstreamConn> = {
  open(socket) {
    const conn = socket.data;
    conn.socket = socket;
    conn.out = new Outbox(socket as Socket<unknown>);
    if (conn.closed) socket.terminate();
    else if (!conn.pool.target.tls) conn.pool.ready(conn, socket);
  },
  handshake(socket) {
    const conn = socket.data;
    if (!conn.closed) conn.pool.ready(conn, socket);
  },
  data(socket, chunk) {
    const conn = socket.data;
    const owner = conn.owner;
    if (!owner) {
      conn.destroy(); // bytes nobody asked for
      return;
    }
    conn.framer.feed(chunk, owner.responses);
    owner.upstreamBatchEnd();
  },
  drain(socket) {
    const conn = socket.data;
    if (conn.out?.drain()) conn.owner?.upstreamDrained();
  },
  error(socket, error) {
    socket.data.lastError = error;
    // An exception thrown while handling this connection's data (not a socket error): drop the connection,
    // so that close fails the exchange it served with a 502.
    if (!(error as Error & { code?: string }).code) socket.terminate();
  },
  close(socket) {
    const conn = socket.data;
    clearTimeout(conn.timer);
    if (conn.closed) return;
    const owner = conn.owner;
    if (!conn.ready) {
      conn.closed = true;
      conn.owner = undefined;
      owner?.upstreamFailed(conn.lastError ?? closedEarly());
      return;
    }
    conn.closed = true;
    if (owner) {
      conn.framer.closed(owner.responses);
      owner.upstreamBatchEnd();
    }
    // The owner may have finished its exchange with the events above and let go of the connection.
    if (conn.owner) {
      conn.owner = undefined;
      owner?.upstreamClosed(conn.lastError?.message);
    }
  },
  connectError(socket, error) {
    const conn = socket.data;
    conn.pool.fail(conn, error);
  },
};
