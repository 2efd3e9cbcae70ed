import { parseDuration } from "../../../lib/duration.ts";
import type { ListenerConfig } from "../../config/types.ts";

/** The buffer middleware's options (docs/proxy-mqtt.md) in working units; zero values already defaulted. */
export interface BufferOptions {
  maxBytes: number;
  /** 0: no count limit. */
  maxMessages: number;
  /** 0: no expiry. */
  maxTtlMs: number;
  overflow: "reject" | "drop-oldest" | "drop-newest";
  backoffInitialMs: number;
  backoffMaxMs: number;
  /** timeouts.idle: an upstream connection with nothing to send is closed after this long. */
  idleMs: number;
  /** timeouts.read: a client connection must send its CONNECT within this long. */
  connectMs: number;
  /** storage.path of storage.type sqlite; undefined in memory. */
  path?: string;
}

type BufferEntry = Extract<ListenerConfig["middlewares"][number], { type: "buffer" }>;

/** The listener's buffer options, or undefined when it has no buffer middleware (unbuffered MQTT). */
export function bufferOptions(l: ListenerConfig): BufferOptions | undefined {
  const m = l.middlewares.find((e): e is BufferEntry => e.type === "buffer");
  if (!m) return undefined;
  // Validation has already replaced zero durations by their defaults.
  return {
    maxBytes: m.storage["max-bytes"],
    maxMessages: m.storage["max-messages"],
    maxTtlMs: parseDuration(m.storage["max-ttl"]),
    overflow: m["overflow-policy"],
    backoffInitialMs: parseDuration(m["reconnect-backoff"].initial),
    backoffMaxMs: parseDuration(m["reconnect-backoff"].max),
    idleMs: l.timeouts.idleMs,
    connectMs: l.timeouts.readMs,
    ...(m.storage.type === "sqlite" && m.storage.path ? { path: m.storage.path } : {}),
  };
}
