import type { ListenerConfig } from "../config/validate.ts";
import type { ListenerDeps, RunningListener } from "../listener.ts";
import { acceptStreams } from "../stream/accept.ts";
import { targetDialer } from "../stream/dial.ts";
import { relay } from "../stream/relay.ts";

/**
 * A TCP listener (specification 4.2): each accepted connection gets its own connection to the target and
 * bytes are relayed both ways unchanged. No timeouts apply (section 8): a connection lives as long as both
 * ends keep it open. A target that cannot be reached or is refused closes the caller's connection.
 */
export function startTcpListener(l: ListenerConfig, deps: ListenerDeps): Promise<RunningListener> {
  const log = deps.log.with({ listener: l.name });
  const dial = targetDialer(l, deps);
  return acceptStreams(l, deps, (caller, peer) => {
    const started = performance.now();
    const connLog = log.with({ remote: caller.remoteAddress, ...(peer ? { peer: peer.id.uri } : {}) });
    // Bytes the caller sends before the target is connected wait in the paused socket, not in the proxy.
    caller.pause();
    caller.once("error", () => {});
    dial().then(
      async ({ socket, upstream }) => {
        if (caller.destroyed) {
          socket.destroy();
          return;
        }
        connLog.debug("connected", { ...(upstream ? { upstream: upstream.id.uri } : {}) });
        const r = await relay(caller, socket);
        deps.events?.relayed(r.toTarget, r.toCaller);
        connLog.debug("closed", {
          to_target: r.toTarget,
          to_caller: r.toCaller,
          seconds: (performance.now() - started) / 1000,
          ...(r.error ? { error: r.error.message } : {}),
        });
      },
      (e: Error & { code?: string }) => {
        caller.destroy();
        if (e.code === "unauthorized_peer" || e.code === "untrusted_peer" || e.code === "invalid_svid")
          deps.events?.denied("target", e.code);
        connLog.warn("target failed", { reason: e.message });
      },
    );
  });
}
