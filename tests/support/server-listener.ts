import type { ListenerConfig } from "../../proxy/config/types.ts";
import { startHttpListener } from "../../proxy/http/full/listener.ts";
import type { ListenerDeps } from "../../proxy/listener.ts";
import { freePort } from "./net.ts";

/** A server-mode HTTP listener over SPIFFE mTLS on loopback with `middlewares` (no target behind them). */
export async function serverListener(
  middlewares: ListenerConfig["middlewares"],
  deps: ListenerDeps,
  port?: number,
) {
  port ??= await freePort();
  const listener = await startHttpListener(
    {
      name: "in",
      address: { host: "127.0.0.1", port },
      mode: "server",
      protocol: "http",
      target: new URL("http://127.0.0.1:9"),
      callerMtls: true,
      targetMtls: false,
      sourceIds: [],
      targetIds: [],
      timeouts: { readMs: 15_000, writeMs: 60_000, idleMs: 120_000, handshakeMs: 10_000 },
      disableKeepalive: false,
      http2: false,
      middlewares,
      buffer: undefined,
    },
    deps,
  );
  return { url: new URL(`https://127.0.0.1:${port}`), close: () => listener.close(0) };
}
