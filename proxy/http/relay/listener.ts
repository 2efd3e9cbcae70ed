import type { Socket, SocketHandler, TCPSocketListener } from "bun";
import { SvcError } from "../../../lib/errors.ts";
import { opensPreface } from "../../../lib/http2/frames.ts";
import type { VerifiedPeer } from "../../../lib/spiffe/x509svid.ts";
import { followBunTls, verifyBunPeer } from "../../../lib/tls/bun-peer.ts";
import type { ListenerConfig } from "../../config/types.ts";
import { fdGate } from "../../fd-budget.ts";
import {
  bindFailure,
  callerRefused,
  drained,
  type ListenerDeps,
  listening,
  type RunningListener,
  sourceAuthorizer,
  targetAuthorizer,
} from "../../listener.ts";
import { handshakeTimedOut } from "../../timeouts.ts";
import { cancellationReport } from "../cancelled.ts";
import type { H2Relay } from "../h2relay/connection.ts";
import type { H2Context } from "../h2relay/context.ts";
import { CallerConn } from "./caller.ts";
import type { RelayContext } from "./context.ts";
import { RelayTarget } from "./target.ts";
import { UpstreamPool } from "./upstream.ts";

/**
 * An HTTP listener without middlewares, as a relay on Bun's own sockets (docs/proxy-http.md): it checks
 * the caller's SPIFFE ID once per connection at the handshake (server and central modes) and serves the
 * connection by its protocol:
 * - HTTP/1.1, to an HTTP/1.1 target: caller.ts, reading request and response heads and body framing
 *   only, with upstream connections kept in a pool;
 * - HTTP/2 (ALPN h2, or h2c with prior knowledge on plaintext), with connection.http2: the HTTP/2 relay
 *   (h2relay/), with a connection to the target of its own;
 * - HTTP/1.1 with connection.http2: handed over to the full path, which translates for the HTTP/2 target.
 * Listeners with middlewares, and every HTTP listener while a key log is written, use the full path.
 *
 * Each accepted TLS connection is given the SVID and bundles in force when it arrives, so rotation
 * needs no restart of the listening socket.
 */
export async function startRelayListener(l: ListenerConfig, deps: ListenerDeps): Promise<RunningListener> {
  const log = deps.log.with({ listener: l.name });
  const mtlsIn = l.callerMtls;
  const spiffe = l.targetMtls ? { spiffe: { source: deps.source, authorize: targetAuthorizer(l) } } : {};
  const open = new Set<Served>();
  const timeouts = l.timeouts;

  // HTTP/1.1 callers of an HTTP/1.1 target.
  const pool = l.http2
    ? undefined
    : new UpstreamPool({
        target: l.target,
        keepAlive: !l.disableKeepalive,
        dialMs: l.timeouts.handshakeMs,
        ...spiffe,
      });
  const ctx: RelayContext | undefined = pool && {
    target: l.target,
    pool,
    timeouts,
    log,
    debug: log.enabled("debug"),
    events: deps.events,
  };
  // HTTP/2 callers; after an SVID rotation each connection is retired (GOAWAY), so that its caller comes
  // back on a new one, whose connection to the target presents the new SVID. The HTTP/2 relay and the
  // full path HTTP/1.1 callers are handed to are loaded only by listeners that speak HTTP/2.
  const http2 = l.http2
    ? {
        H2Relay: (await import("../h2relay/connection.ts")).H2Relay,
        HandoverConn: (await import("./handover.ts")).HandoverConn,
        handover: (await import("../full/listener.ts")).startHandover(l, deps),
      }
    : undefined;
  const isH2 = (c: Served): c is H2Relay => http2 !== undefined && c instanceof http2.H2Relay;
  const h2: H2Context | undefined = l.http2
    ? {
        target: new RelayTarget({ target: l.target, alpn: "h2", ...spiffe }, () => {
          for (const c of open) if (isH2(c)) c.retire("SVID rotation");
        }),
        targetUrl: l.target,
        timeouts,
        log,
        debug: log.enabled("debug"),
        events: deps.events,
        cancelled: cancellationReport(log),
      }
    : undefined;

  /** Serves a connection by the protocol it speaks (connection.http2 listeners). */
  const serve = (
    socket: Socket<Served>,
    peer: VerifiedPeer | undefined,
    speaksH2: boolean,
    first?: Uint8Array,
  ) => {
    if (!http2 || !h2) return;
    const next: Served = speaksH2
      ? new http2.H2Relay(socket as Socket<unknown>, h2, peer)
      : new http2.HandoverConn(socket as Socket<unknown>, http2.handover.serve, peer, first);
    open.delete(socket.data);
    socket.data = next;
    open.add(next);
    if (speaksH2 && first) next.received(first);
  };
  const accept = (socket: Socket<Served>, tls: boolean): Served =>
    ctx
      ? new CallerConn(socket as Socket<CallerConn>, ctx, tls)
      : new Undecided(socket, tls, timeouts, serve, (remote) =>
          callerRefused({ events: deps.events, log }, handshakeTimedOut(timeouts), remote),
        );
  const authorizeSource = sourceAuthorizer(l);

  // Past the descriptor budget a new caller is closed at once (fd-budget.ts).
  const gate = fdGate(log);
  const admit = (socket: { terminate(): void }): boolean => gate.admit(() => socket.terminate());

  // One sweep for every connection's deadline, running only while there are connections.
  const every = Math.min(
    1000,
    Math.max(10, Math.min(timeouts.readMs, timeouts.writeMs, timeouts.idleMs, timeouts.handshakeMs) / 10),
  );
  let sweep: ReturnType<typeof setInterval> | undefined;
  const track = (c: Served) => {
    open.add(c);
    deps.events?.connection();
    sweep ??= setInterval(() => {
      const now = Date.now();
      for (const conn of open) if (now >= conn.deadline) conn.expire();
    }, every);
  };
  const untrack = (c: Served) => {
    c.gone();
    gate.release();
    open.delete(c);
    if (open.size === 0 && sweep) {
      clearInterval(sweep);
      sweep = undefined;
    }
  };

  // Our SVID and the bundles, read again after each rotation; HTTP/2 by ALPN where the target speaks it.
  const serverTls = mtlsIn
    ? followBunTls(deps.source, {
        requestCert: true,
        rejectUnauthorized: false,
        isServer: true,
        ...(l.http2 ? { ALPNProtocols: H2_OR_HTTP1 } : {}),
      })
    : undefined;

  // Bun hands an exception thrown while serving a connection to its error handler: that connection ends
  // with a log line; the process and every other connection go on. Socket errors (with an errno code)
  // are followed by close, which does the rest.
  const failed = (c: Served, e: Error & { code?: string }) => {
    if (e.code) return;
    log.warn("caller connection failed", { error: e.message });
    c.terminate();
  };

  const callerHandlers: SocketHandler<Served> = {
    handshake(socket) {
      const c = socket.data as CallerConn | Undecided;
      try {
        c.accepted(verifyBunPeer(socket as Socket<unknown>, "server", deps.source, authorizeSource));
      } catch (e) {
        const err = e instanceof SvcError ? e : new SvcError("untrusted_peer", (e as Error).message);
        callerRefused({ events: deps.events, log }, err, socket.remoteAddress);
        c.terminate();
      }
    },
    data(socket, data) {
      socket.data.received(data);
    },
    drain(socket) {
      socket.data.drained();
    },
    close(socket) {
      untrack(socket.data);
    },
    error(socket, e) {
      failed(socket.data, e);
    },
  };

  let listener: TCPSocketListener<Served | undefined>;
  try {
    listener = Bun.listen<Served | undefined>({
      hostname: l.address.host || "0.0.0.0",
      port: l.address.port,
      socket: mtlsIn
        ? {
            open(raw) {
              if (!admit(raw)) return;
              // The TLS layer on top of the accepted socket; its handlers serve the connection from here.
              const [, secure] = (raw as unknown as Upgradable).upgradeTLS({
                tls: serverTls?.current(),
                socket: callerHandlers,
                data: undefined,
              });
              const c = accept(secure, true);
              secure.data = c;
              track(c);
            },
            data() {},
            error() {},
          }
        : {
            open(socket) {
              if (!admit(socket)) return;
              const c = accept(socket as Socket<Served>, false);
              socket.data = c;
              track(c);
            },
            data(socket, data) {
              socket.data?.received(data);
            },
            drain(socket) {
              socket.data?.drained();
            },
            close(socket) {
              if (socket.data) untrack(socket.data);
            },
            error(socket, e) {
              if (socket.data) failed(socket.data, e);
            },
          },
    });
  } catch (e) {
    pool?.close();
    h2?.target.close();
    void http2?.handover.close(0);
    serverTls?.close();
    throw bindFailure(l, e as NodeJS.ErrnoException);
  }
  listening(log, l, listener.port, "relay");

  return {
    port: listener.port,
    async close(drainMs) {
      listener.stop(false);
      serverTls?.close();
      for (const c of open)
        if (isH2(c)) c.retire("shutdown");
        else if (c.idle && c instanceof CallerConn) c.closeSoon();
      await Promise.all([
        drained(() => [...open].some((c) => !c.idle), drainMs),
        http2?.handover.close(drainMs),
      ]);
      for (const c of open) c.terminate();
      pool?.close();
      h2?.target.close();
    },
  };
}

/** ALPN's wire form of "h2" then "http/1.1": each name after its length. */
const H2_OR_HTTP1 = Buffer.from("\x02h2\x08http/1.1", "latin1");

/** What the listener asks of each caller connection, whatever serves it. */
interface Served {
  /** When expire() is due (the listener's sweep). */
  deadline: number;
  /** No request in flight: a drain may close it now. */
  readonly idle: boolean;
  received(data: Uint8Array): void;
  drained(): void;
  expire(): void;
  terminate(): void;
  /** The connection closed. */
  gone(): void;
}

/**
 * A connection of a connection.http2 listener before its protocol is known: over TLS, ALPN says it at
 * the handshake; on plaintext, its first bytes are HTTP/2's preface or not (h2c with prior knowledge).
 */
class Undecided implements Served {
  deadline: number;
  readonly idle = true;
  private seen: Uint8Array = new Uint8Array(0);

  constructor(
    private readonly socket: Socket<Served>,
    private readonly tls: boolean,
    timeouts: ListenerConfig["timeouts"],
    private readonly serve: (
      s: Socket<Served>,
      peer: VerifiedPeer | undefined,
      h2: boolean,
      first?: Uint8Array,
    ) => void,
    /** The TLS handshake did not finish in time. */
    private readonly refused: (remote: string) => void,
  ) {
    this.deadline = Date.now() + (tls ? timeouts.handshakeMs : timeouts.readMs);
  }

  accepted(peer: VerifiedPeer | undefined): void {
    this.serve(this.socket, peer, this.socket.alpnProtocol === "h2");
  }

  received(data: Uint8Array): void {
    if (this.tls) return;
    this.seen = this.seen.length ? Buffer.concat([this.seen, data]) : data;
    const h2 = opensPreface(this.seen);
    if (h2 !== undefined) this.serve(this.socket, undefined, h2, this.seen);
  }

  drained(): void {}

  expire(): void {
    if (this.tls) this.refused(this.socket.remoteAddress);
    this.terminate();
  }

  terminate(): void {
    this.socket.terminate();
  }

  gone(): void {}
}

interface Upgradable {
  upgradeTLS(o: {
    tls: unknown;
    socket: SocketHandler<Served>;
    data: undefined;
  }): [Socket<Served>, Socket<Served>];
}
