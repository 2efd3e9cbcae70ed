/**
 * What each of a listener's four timeouts bounds and what it answers when it runs out, written once for
 * every protocol and path (docs/proxy-configuration.md, "Timeouts: which applies where"):
 *
 * - `handshake`: a caller's TLS handshake (server and central listeners), refused under `handshake`; and
 *   the connection to the target with its handshake (the relays, HTTP/2 targets, TCP and MQTT);
 * - `read`: an HTTP request, head and body, from its first byte: `408`;
 * - `write`: an HTTP target's answer, from the end of the request: `504` (for an open-ended stream, its
 *   head only: http/types.ts `open`);
 * - `idle`: a kept-alive HTTP connection with no request in flight, closed without an answer; and a
 *   pause in a chat-completions stream (middleware/openai-stream.ts).
 *
 * The MQTT publish buffer's `connectMs` and `idleMs` are `read` and `idle`, set by the configuration
 * (proxy/config/rules.ts). TCP and MQTT relays use `handshake` only.
 */
import { SvcError } from "../lib/errors.ts";

export interface Timeouts {
  readMs: number;
  writeMs: number;
  idleMs: number;
  handshakeMs: number;
}

/** The stages of a caller's connection a timeout bounds. */
export type Stage = "handshake" | "read" | "write" | "idle";

/** How long a connection may stay in `stage`. */
export function stageMs(t: Timeouts, stage: Stage): number {
  switch (stage) {
    case "handshake":
      return t.handshakeMs;
    case "read":
      return t.readMs;
    case "write":
      return t.writeMs;
    case "idle":
      return t.idleMs;
  }
}

/** `read` ran out: the request (head and body) did not arrive in time. */
export const requestTimedOut = (t: Timeouts) => ({
  status: 408,
  message: `request not received within ${t.readMs} ms`,
});

/** `write` ran out: the target did not answer in time. */
export const targetTimedOut = (t: Timeouts, target: URL) => ({
  status: 504,
  message: `upstream ${target.origin} did not answer within ${t.writeMs} ms`,
});

/** `handshake` ran out: the caller is refused as a failed handshake (proxy/listener.ts callerRefused). */
export const handshakeTimedOut = (t: Timeouts) =>
  new SvcError("untrusted_peer", `TLS handshake failed: not completed within ${t.handshakeMs} ms`);
