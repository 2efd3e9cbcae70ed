import type { Server } from "node:net";
import { SvcError } from "../lib/errors.ts";
import { type Authorizer, authorizeMatching } from "../lib/spiffe/authorizer.ts";
import type { SvidSource } from "../lib/spiffe/x509-source.ts";
import type { KeyLog } from "../lib/tls/keylog.ts";
import type { ListenerConfig } from "./config/types.ts";
import { guardDescriptors } from "./fd-budget.ts";
import type { Logger } from "./log.ts";
import type { BufferEvents } from "./mqtt/buffer/events.ts";
import type { Notary } from "./notary-service/notary.ts";
import type { Witness } from "./witness/witness.ts";

/**
 * The reason a refused caller is counted and logged under: `handshake` when the TLS handshake itself
 * failed (no or an untrusted certificate, as the TLS stack judged it), otherwise the error's code.
 */
function refusalReason(e: { message: string; code: string }): string {
  return e.message.startsWith("TLS handshake failed") ? "handshake" : e.code;
}

/**
 * A caller refused at the handshake or by the source patterns, on any listener: counted under its reason
 * (svc_proxy_denied_total{side="source"}) and logged with the reason and the caller's address.
 */
export function callerRefused(
  deps: Pick<ListenerDeps, "events" | "log">,
  e: SvcError,
  remote: string | undefined,
): void {
  const code = refusalReason(e);
  deps.events?.denied("source", code);
  deps.log.warn("caller refused", { reason: e.message, code, remote });
}

/** The callers a listener admits: its `source.spiffe_ids`, on every path (a relay, the full path, streams). */
export const sourceAuthorizer = (l: ListenerConfig): Authorizer =>
  authorizeMatching(l.sourceIds, `listeners.${l.name}.source.spiffe_ids`);

/** The targets a listener speaks to over SPIFFE mTLS: its `target.spiffe_ids`, on every path. */
export const targetAuthorizer = (l: ListenerConfig): Authorizer =>
  authorizeMatching(l.targetIds, `listeners.${l.name}.target.spiffe_ids`);

/** What every listener (http, tcp, mqtt) reports to metrics. */
export interface ListenerEvents {
  /** A finished HTTP exchange; the byte counts are of the request and response bodies. */
  request(status: number, seconds: number, requestBytes: number, responseBytes: number): void;
  /**
   * `reason` is a short code: a peer refused by the SPIFFE checks (lib/errors.ts isPeerRefusal), a
   * caller's `handshake`, or a target the notary refused (`pod_mismatch`, …).
   */
  denied(side: "source" | "target", reason: string): void;
  connection(): void;
  /** A TCP or MQTT connection ended by a fault (malformed, error, target_unreachable). */
  failed(reason: "malformed" | "error" | "target_unreachable"): void;
  /** A caller's HTTP/2 connection ended for abuse: control_flood, rapid_reset, protocol_error (http/full/h2-guard.ts). */
  http2Ended(reason: string): void;
  /** A streamed chat completion through the openai middleware ended: `end` says how (openai-stream.ts). */
  chatStream(end: string): void;
  /** Bytes a finished TCP or MQTT connection carried each way. */
  relayed(toTarget: number, toCaller: number): void;
  /** The MQTT publish buffer of this listener. */
  buffer: BufferEvents;
}

export interface ListenerDeps {
  source: SvidSource;
  log: Logger;
  keylog?: KeyLog;
  events?: ListenerEvents;
  notary?: Notary;
  witness?: Witness;
}

export interface RunningListener {
  port: number;
  /** Stops accepting, waits up to `drainMs` for in-flight work, then closes every connection. */
  close(drainMs: number): Promise<void>;
}

/** A listener that cannot bind its address: a usage error naming the listener, the address and why. */
export function bindFailure(l: ListenerConfig, e: NodeJS.ErrnoException): SvcError {
  return new SvcError(
    "usage",
    `listener ${l.name}: cannot listen on ${l.address.host}:${l.address.port}: ${e.code === "EADDRINUSE" ? "address already in use" : e.message}`,
  );
}

/**
 * Puts a listener's node:net server (the full path, TCP, MQTT) to work: its errors logged, the descriptor
 * budget guarded (past it a new caller is closed at once: accepting would fail, and the runtime would
 * retry the listening socket without end, fd-budget.ts), bound to the listener's address (bindFailure
 * when it cannot), and the listening line logged. Returns the port.
 */
export async function listen(
  server: Server,
  l: ListenerConfig,
  log: Logger,
  path: "full" | "stream",
): Promise<number> {
  server.on("error", (e) => log.error("listener error", { error: e.message }));
  guardDescriptors(server, log);
  const port = await new Promise<number>((resolve, reject) => {
    const failed = (e: NodeJS.ErrnoException) => reject(bindFailure(l, e));
    server.once("error", failed);
    server.listen(l.address.port, l.address.host || undefined, () => {
      server.off("error", failed);
      resolve((server.address() as { port: number }).port);
    });
  });
  listening(log, l, port, path);
  return port;
}

/**
 * The line every listener logs once it accepts callers (tests and operators wait for it). `path`: the
 * HTTP path that serves it (relay or full), or stream for TCP and MQTT.
 */
export function listening(
  log: Logger,
  l: ListenerConfig,
  port: number,
  path: "relay" | "full" | "stream",
): void {
  log.info("listening", {
    address: `${l.address.host}:${port}`,
    mode: l.mode,
    protocol: l.protocol,
    target: l.target.href,
    path,
  });
}

/** Waits while `busy()` holds, up to `drainMs`: a closing listener's in-flight work. */
export async function drained(busy: () => boolean, drainMs: number): Promise<void> {
  const deadline = Date.now() + drainMs;
  while (busy() && Date.now() < deadline) await Bun.sleep(20);
}
