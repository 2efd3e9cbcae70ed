/**
 * What ends a caller's HTTP/2 connection for abuse (docs/proxy-http.md, "Limits"):
 * - `control_flood`: PING and SETTINGS frames beyond a budget of CONTROL_BURST, refilled at CONTROL_RATE
 *   a second. Each must be answered; a caller that sends them faster than any keepalive would is ended by
 *   the proxy with GOAWAY ENHANCE_YOUR_CALM. Over TLS the runtime may get there first, when the answers
 *   it has queued pile up ("Flooding was detected").
 * - `rapid_reset`: the runtime's HTTP/2 framing ended the connection with ENHANCE_YOUR_CALM, its limit on
 *   streams a caller opens and resets at once.
 * - `protocol_error`: the runtime's framing ended it for a frame it cannot accept (among them a header
 *   block continued without end by CONTINUATION frames).
 * Any other session error (a caller that went away) is not abuse.
 */
import http2 from "node:http2";

export type H2Abuse = "control_flood" | "rapid_reset" | "protocol_error";

const CONTROL_BURST = 1000;
const CONTROL_RATE = 100;

const { NGHTTP2_ENHANCE_YOUR_CALM } = http2.constants;

/**
 * Watches one caller session: `ended` is told of abuse, and the session is destroyed (by the runtime, or
 * here for a control flood). The connection under it is the listener's to close when the session does.
 */
export function guardSession(
  session: http2.Http2Session,
  ended: (reason: H2Abuse, detail: string) => void,
): void {
  let tokens = CONTROL_BURST;
  let last = performance.now();
  let over = false;
  const control = () => {
    if (over) return;
    const now = performance.now();
    tokens = Math.min(CONTROL_BURST, tokens + ((now - last) / 1000) * CONTROL_RATE);
    last = now;
    if (--tokens >= 0) return;
    over = true;
    ended("control_flood", `more than ${CONTROL_BURST} PING and SETTINGS frames (${CONTROL_RATE} a second)`);
    if (!session.destroyed) session.goaway(NGHTTP2_ENHANCE_YOUR_CALM);
    session.destroy();
  };
  session.on("ping", control);
  session.on("remoteSettings", control);
  session.on("error", (e: NodeJS.ErrnoException) => {
    if (over) return;
    if (e.code === "ERR_HTTP2_SESSION_ERROR" && e.message.endsWith(`code ${NGHTTP2_ENHANCE_YOUR_CALM}`))
      ended("rapid_reset", e.message);
    else if (e.code === "ERR_HTTP2_ERROR")
      ended(e.message.startsWith("Flooding was detected") ? "control_flood" : "protocol_error", e.message);
  });
}
