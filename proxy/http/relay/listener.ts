import type { Socket, SocketHandler, TCPSocketListener } from "bun";
import { SvcError } from "../../../lib/errors.ts";
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
import { CallerConn } from "./caller.ts";
import type { RelayContext } from "./context.ts";
import { UpstreamPool } from "./upstream.ts";

/**
 * An HTTP listener without middlewares, as a relay on Bun's own sockets (docs/proxy-http.md): it parses
 * request and response heads and body framing only, checks the caller's SPIFFE ID once per connection at
 * the handshake (server and central modes), and keeps upstream connections in a pool. Listeners with
 * middlewares, and every HTTP listener while a key log is written, use the full path instead.
 *
 * Each accepted TLS connection is given the SVID and bundles in force when it arrives, so rotation
 * needs no restart of the listening socket.
 */
export async function startRelayListener(l: ListenerConfig, deps: ListenerDeps): Promise<RunningListener> {
  const log = deps.log.with({ listener: l.name });
  const mtlsIn = l.callerMtls;
  const pool = new UpstreamPool({
    target: l.target,
    keepAlive: !l.disableKeepalive,
    ...(l.targetMtls
      ? {
          spiffe: {
            source: deps.source,
            authorize: targetAuthorizer(l),
          },
        }
      : {}),
  });
  const ctx: RelayContext = {
    target: l.target,
    pool,
    timeouts: l.timeouts,
    log,
    debug: log.enabled("debug"),
    events: deps.events,
  };
  const authorizeSource = sourceAuthorizer(l);
  const open = new Set<CallerConn>();

  // Past the descriptor budget a new caller is closed at once (fd-budget.ts).
  const gate = fdGate(log);
  const admit = (socket: { terminate(): void }): boolean => gate.admit(() => socket.terminate());

  // One sweep for every connection's deadline, running only while there are connections.
  const t = l.timeouts;
  const every = Math.min(1000, Math.max(10, Math.min(t.readMs, t.writeMs, t.idleMs, t.handshakeMs) / 10));
  let sweep: ReturnType<typeof setInterval> | undefined;
  const track = (c: CallerConn) => {
    open.add(c);
    deps.events?.connection();
    sweep ??= setInterval(() => {
      const now = Date.now();
      for (const conn of open) if (now >= conn.deadline) conn.expire();
    }, every);
  };
  const untrack = (c: CallerConn) => {
    c.gone();
    gate.release();
    open.delete(c);
    if (open.size === 0 && sweep) {
      clearInterval(sweep);
      sweep = undefined;
    }
  };

  // Our SVID and the bundles, read again after each rotation.
  const serverTls = mtlsIn
    ? followBunTls(deps.source, { requestCert: true, rejectUnauthorized: false, isServer: true })
    : undefined;

  // Bun hands an exception thrown while serving a connection to its error handler: that connection ends
  // with a log line; the process and every other connection go on. Socket errors (with an errno code)
  // are followed by close, which does the rest.
  const failed = (c: CallerConn, e: Error & { code?: string }) => {
    if (e.code) return;
    log.warn("caller connection failed", { error: e.message });
    c.terminate();
  };

  const callerHandlers: SocketHandler<CallerConn> = {
    handshake(socket) {
      const c = socket.data;
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

  let listener: TCPSocketListener<CallerConn | undefined>;
  try {
    listener = Bun.listen<CallerConn | undefined>({
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
              const c = new CallerConn(secure, ctx, true);
              secure.data = c;
              track(c);
            },
            data() {},
            error() {},
          }
        : {
            open(socket) {
              if (!admit(socket)) return;
              const c = new CallerConn(socket as Socket<CallerConn>, ctx, false);
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
    pool.close();
    serverTls?.close();
    throw bindFailure(l, e as NodeJS.ErrnoException);
  }
  listening(log, l, listener.port, "relay");

  return {
    port: listener.port,
    async close(drainMs) {
      listener.stop(false);
      serverTls?.close();
      for (const c of open) if (c.idle) c.closeSoon();
      await drained(() => [...open].some((c) => !c.idle), drainMs);
      for (const c of open) c.terminate();
      pool.close();
    },
  };
}

interface Upgradable {
  upgradeTLS(o: {
    tls: unknown;
    socket: SocketHandler<CallerConn>;
    data: undefined;
  }): [Socket<CallerConn>, Socket<CallerConn>];
}
