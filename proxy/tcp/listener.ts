import type { ListenerConfig } from "../config/types.ts";
import type { ListenerDeps, RunningListener } from "../listener.ts";
import { acceptStreams } from "../stream/accept.ts";
import { targetDialer } from "../stream/dial.ts";
import { pipeBoth } from "../stream/pipe.ts";
import { serveCaller } from "../stream/serve-caller.ts";

/**
 * A TCP listener (docs/proxy-tcp.md): each accepted connection gets its own connection to the target and
 * bytes are relayed both ways unchanged. Of the timeouts only `handshake` applies: an established
 * connection lives as long as both ends keep it open. A target that cannot be reached or is refused
 * closes the caller's connection.
 */
export function startTcpListener(l: ListenerConfig, deps: ListenerDeps): Promise<RunningListener> {
  const log = deps.log.with({ listener: l.name });
  const dial = targetDialer(l, deps);
  return acceptStreams(l, deps, (caller, peer) =>
    serveCaller(caller, peer, dial, deps, log, (c, target) => pipeBoth(c, target.socket)),
  );
}
