/**
 * The dialling side of a byte-stream listener: tls:// and mqtts:// targets (client and central modes) over
 * SPIFFE mTLS with the `target.spiffe_ids` restriction, so the upstream is authenticated before a byte
 * moves; tcp:// and mqtt:// targets in plaintext. Failures are SvcErrors whose message names the target.
 */
import net, { type Socket } from "node:net";
import { SvcError } from "../../lib/errors.ts";
import { connectMtls } from "../../lib/tls/mtls.ts";
import { presentedChain } from "../../lib/tls/peer.ts";
import { socketHost } from "../../lib/url-host.ts";
import type { ListenerConfig } from "../config/types.ts";
import type { Upstream } from "../http/types.ts";
import { type ListenerDeps, targetAuthorizer } from "../listener.ts";

export interface Dialled {
  socket: Socket;
  /** The authenticated upstream workload (mTLS targets only). */
  upstream?: Upstream;
}

export type Dialer = () => Promise<Dialled>;

export function targetDialer(l: ListenerConfig, deps: ListenerDeps): Dialer {
  // A connection to the target and its TLS handshake are bounded by the listener's `handshake`.
  const connectMs = l.timeouts.handshakeMs;
  const host = socketHost(l.target.hostname);
  const port = Number(l.target.port);
  const where = `${host}:${port}`;
  if (l.targetMtls) {
    const policy = {
      source: deps.source,
      authorize: targetAuthorizer(l),
      ...(deps.keylog ? { keylog: deps.keylog } : {}),
    };
    return async () => {
      try {
        const { socket, peer } = await connectMtls({
          host,
          port,
          policy,
          allowHalfOpen: true,
          timeoutMs: connectMs,
          ...(net.isIP(host) ? {} : { servername: host }),
        });
        return { socket, upstream: { id: peer.id, chain: presentedChain(socket) } };
      } catch (e) {
        throw dialError(where, e as Error);
      }
    };
  }
  return () =>
    new Promise<Dialled>((resolve, reject) => {
      const socket = net.connect({ host, port, allowHalfOpen: true });
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new SvcError("network", `target ${where} did not accept within ${connectMs} ms`));
      }, connectMs);
      socket.once("connect", () => {
        clearTimeout(timer);
        resolve({ socket });
      });
      socket.once("error", (e) => {
        clearTimeout(timer);
        reject(dialError(where, e));
      });
    });
}

function dialError(where: string, e: Error): SvcError {
  if (e instanceof SvcError) return new SvcError(e.code, `target ${where} refused: ${e.message}`);
  const code = (e as NodeJS.ErrnoException).code;
  return new SvcError("network", `target ${where} unreachable (${code ?? e.message})`);
}
