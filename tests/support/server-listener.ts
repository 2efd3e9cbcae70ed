import type { ListenerConfig } from "../../proxy/config/types.ts";
import { startHttpListener } from "../../proxy/http/full/listener.ts";
import type { ListenerDeps } from "../../proxy/listener.ts";
import { freePort } from "./net.ts";

/** An HTTP listener's resolved configuration: the given fields, and every other at its default. */
export function listenerConfig(
  o: Pick<ListenerConfig, "name" | "address" | "mode" | "target"> & Partial<ListenerConfig>,
): ListenerConfig {
  return {
    protocol: "http",
    callerMtls: false,
    targetMtls: false,
    sourceIds: [],
    targetIds: [],
    timeouts: { readMs: 15_000, writeMs: 60_000, idleMs: 120_000, handshakeMs: 10_000 },
    disableKeepalive: false,
    http2: false,
    middlewares: [],
    buffer: undefined,
    ...o,
  };
}

/** A server-mode HTTP listener over SPIFFE mTLS on loopback with `middlewares` (no target behind them). */
export async function serverListener(
  middlewares: ListenerConfig["middlewares"],
  deps: ListenerDeps,
  port?: number,
) {
  port ??= await freePort();
  const listener = await startHttpListener(
    listenerConfig({
      name: "in",
      address: { host: "127.0.0.1", port },
      mode: "server",
      target: new URL("http://127.0.0.1:9"),
      callerMtls: true,
      middlewares,
    }),
    deps,
  );
  return { url: new URL(`https://127.0.0.1:${port}`), close: () => listener.close(0) };
}
