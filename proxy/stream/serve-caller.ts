/**
 * One accepted caller of a TCP or unbuffered MQTT listener: the caller is paused (what it sends waits in
 * its socket) while the target is dialled; then `carry` moves the bytes. A target that cannot be reached
 * or is refused closes the caller, is logged as `target failed` and counted as a target denial when
 * refused. The end of each connection is logged at debug level with its byte counts.
 */
import type { Socket } from "node:net";
import { isPeerRefusal } from "../../lib/errors.ts";
import type { VerifiedPeer } from "../../lib/spiffe/x509svid.ts";
import type { ListenerDeps } from "../listener.ts";
import type { Logger } from "../log.ts";
import type { Dialer, Dialled } from "./dial.ts";

export interface Carried {
  toTarget: number;
  toCaller: number;
  reason?: string;
}

export function serveCaller(
  caller: Socket,
  peer: VerifiedPeer | undefined,
  dial: Dialer,
  deps: ListenerDeps,
  log: Logger,
  carry: (caller: Socket, target: Dialled, log: Logger) => Promise<Carried>,
): void {
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
      connLog.debug("connected", { ...(target.upstream ? { upstream: target.upstream.id.uri } : {}) });
      const r = await carry(caller, target, connLog);
      deps.events?.relayed(r.toTarget, r.toCaller);
      if (r.reason) deps.events?.failed(r.reason.startsWith("malformed MQTT packet") ? "malformed" : "error");
      connLog.debug("closed", {
        to_target: r.toTarget,
        to_caller: r.toCaller,
        seconds: (performance.now() - started) / 1000,
        ...(r.reason ? { reason: r.reason } : {}),
      });
    },
    (e: Error & { code?: string }) => {
      caller.destroy();
      if (isPeerRefusal(e)) deps.events?.denied("target", e.code);
      else deps.events?.failed("target_unreachable");
      connLog.warn("target failed", { reason: e.message });
    },
  );
}
