/**
 * The accepting side of a byte-stream listener (tcp, mqtt): plaintext in client mode; SPIFFE mTLS with
 * the `source.spiffe_ids` restriction in server and central modes, where a refused caller is closed before
 * any byte is relayed. Sockets keep their writable side after the caller half-closes, so a relay can pass
 * the half-close on. close() stops accepting, lets connections finish within `drainMs`, then closes them.
 */
import net, { type Socket } from "node:net";
import type { VerifiedPeer } from "../../lib/spiffe/x509svid.ts";
import { createMtlsServer } from "../../lib/tls/mtls.ts";
import type { ListenerConfig } from "../config/types.ts";
import {
  callerRefused,
  drained,
  type ListenerDeps,
  listen,
  type RunningListener,
  sourceAuthorizer,
} from "../listener.ts";

export type StreamHandler = (socket: Socket, peer: VerifiedPeer | undefined) => void;

/** Runs `fn` at time `when` (ms since the epoch), also beyond setTimeout's 24.8-day limit. */
function at(when: number, fn: () => void): { cancel(): void } {
  let timer: ReturnType<typeof setTimeout>;
  const arm = () => {
    const left = when - Date.now();
    timer = left > 0x7fffffff ? setTimeout(arm, 0x7fffffff) : setTimeout(fn, Math.max(0, left));
  };
  arm();
  return { cancel: () => clearTimeout(timer) };
}

export async function acceptStreams(
  l: ListenerConfig,
  deps: ListenerDeps,
  handle: StreamHandler,
): Promise<RunningListener> {
  const log = deps.log.with({ listener: l.name });
  const open = new Set<Socket>();
  const track = (socket: Socket, peer: VerifiedPeer | undefined) => {
    open.add(socket);
    // The connection ends (FIN, then the relay's own close) once the caller's certificate expires.
    const expiry = peer
      ? at(peer.notAfter.getTime(), () => {
          log.info("caller certificate expired; connection closed", { peer: peer.id.uri });
          socket.end();
        })
      : undefined;
    socket.once("close", () => {
      open.delete(socket);
      expiry?.cancel();
    });
    deps.events?.connection();
    handle(socket, peer);
  };
  let server: net.Server;
  let stop: () => Promise<void>;
  if (l.callerMtls) {
    const mtls = createMtlsServer(
      {
        source: deps.source,
        authorize: sourceAuthorizer(l),
        handshakeTimeoutMs: l.timeouts.handshakeMs,
        ...(deps.keylog ? { keylog: deps.keylog } : {}),
      },
      {
        allowHalfOpen: true,
        onConnection: track,
        onReject: (e, socket) => callerRefused({ events: deps.events, log }, e, socket?.remoteAddress),
      },
    );
    server = mtls.server;
    stop = mtls.close;
  } else {
    server = net.createServer({ allowHalfOpen: true }, (socket) => track(socket, undefined));
    stop = () => new Promise((resolve) => server.close(() => resolve()));
  }
  const port = await listen(server, l, log, "stream");
  return {
    port,
    async close(drainMs) {
      const stopped = stop();
      await drained(() => open.size > 0, drainMs);
      for (const socket of open) socket.destroy();
      await stopped;
    },
  };
}
