/**
 * An MQTT listener (docs/proxy-mqtt.md): modes and schemes as for TCP (mqtt:// and mqtts://). Without the
 * buffer middleware each caller connection is tunnelled to its own target connection (tunnel.ts); with
 * it, publishing sessions are acknowledged here and delivered through the buffer (buffer/).
 */
import type { ListenerConfig } from "../config/types.ts";
import type { ListenerDeps, RunningListener } from "../listener.ts";
import { acceptStreams } from "../stream/accept.ts";
import { targetDialer } from "../stream/dial.ts";
import { serveCaller } from "../stream/serve-caller.ts";

import { PublishBuffer, type PublishBufferDeps } from "./buffer/publish-buffer.ts";
import { MemoryStore } from "./buffer/store.ts";
import { tunnel } from "./tunnel.ts";

const NO_BUFFER_EVENTS = {
  depth() {},
  dropped() {},
  delivered() {},
  connect() {},
  stored() {},
  replayed() {},
  storageFailed() {},
};

export async function startMqttListener(l: ListenerConfig, deps: ListenerDeps): Promise<RunningListener> {
  const log = deps.log.with({ listener: l.name });
  const dial = targetDialer(l, deps);
  const options = l.buffer;
  if (options) {
    const buffer = await openBuffer(l.name, {
      options,
      dial,
      events: deps.events?.buffer ?? NO_BUFFER_EVENTS,
      log,
    });
    let running: RunningListener;
    try {
      running = await acceptStreams(l, deps, (caller, peer) =>
        buffer.accept(
          caller,
          log.with({ remote: caller.remoteAddress, ...(peer ? { peer: peer.id.uri } : {}) }),
          peer?.id.uri,
        ),
      );
    } catch (e) {
      buffer.close(); // its deliveries stop and its file is let go
      throw e;
    }
    return {
      port: running.port,
      async close(drainMs) {
        await running.close(drainMs);
        buffer.close();
      },
    };
  }
  const origin = `${l.target.protocol}//${l.target.host}`;
  return acceptStreams(l, deps, (caller, peer) =>
    serveCaller(caller, peer, dial, deps, log, (c, target, connLog) =>
      tunnel(c, target, { notary: deps.notary, origin, log: connLog }),
    ),
  );
}

/**
 * The listener's buffer over its store: storage.type sqlite opens (and reads back) its file first, and a
 * file that cannot be read stops the listener with an error naming it.
 */
async function openBuffer(name: string, d: Omit<PublishBufferDeps, "store">): Promise<PublishBuffer> {
  const path = d.options.path;
  if (!path) return new PublishBuffer({ ...d, store: new MemoryStore() });
  const { SqliteStore } = await import("./buffer/messages-sqlite.ts");
  return new PublishBuffer({
    ...d,
    store: SqliteStore.open(path, `listener ${name}: storage.path`, d.events, d.log),
  });
}
