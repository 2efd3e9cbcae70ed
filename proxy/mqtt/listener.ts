import type { ListenerConfig } from "../config/validate.ts";
import type { ListenerDeps, RunningListener } from "../listener.ts";
import { acceptStreams } from "../stream/accept.ts";
import { targetDialer } from "../stream/dial.ts";
import { bufferOptions } from "./buffer/options.ts";
import { PublishBuffer } from "./buffer/publish-buffer.ts";
import { tunnel } from "./tunnel.ts";

/**
 * An MQTT listener (specification 4.2): modes and schemes as for TCP (mqtt:// and mqtts://). Without the
 * buffer middleware each caller connection is tunnelled to its own target connection (tunnel.ts); with
 * it, publishing sessions are acknowledged here and delivered through the buffer (buffer/).
 */
const NO_BUFFER_EVENTS = { depth() {}, dropped() {}, delivered() {}, connect() {} };

export async function startMqttListener(l: ListenerConfig, deps: ListenerDeps): Promise<RunningListener> {
  const log = deps.log.with({ listener: l.name });
  const dial = targetDialer(l, deps);
  const options = bufferOptions(l);
  if (options) {
    const buffer = new PublishBuffer({ options, dial, events: deps.events?.buffer ?? NO_BUFFER_EVENTS, log });
    const running = await acceptStreams(l, deps, (caller, peer) =>
      buffer.accept(
        caller,
        log.with({ remote: caller.remoteAddress, ...(peer ? { peer: peer.id.uri } : {}) }),
      ),
    );
    return {
      port: running.port,
      async close(drainMs) {
        await running.close(drainMs);
        buffer.close();
      },
    };
  }
  const origin = `${l.target.protocol}//${l.target.host}`;
  return acceptStreams(l, deps, (caller, peer) => {
    const started = performance.now();
    const connLog = log.with({ remote: caller.remoteAddress, ...(peer ? { peer: peer.id.uri } : {}) });
    caller.pause();
    caller.once("error", () => {});
    dial().then(
      async (target) => {
        if (caller.destroyed) {
          target.socket.destroy();
          return;
        }
        const r = await tunnel(caller, target, { notary: deps.notary, origin, log: connLog });
        deps.events?.relayed(r.toTarget, r.toCaller);
        connLog.debug("closed", {
          to_target: r.toTarget,
          to_caller: r.toCaller,
          seconds: (performance.now() - started) / 1000,
          ...(r.reason ? { reason: r.reason } : {}),
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
