/**
 * Watches a full-path caller session for the abuse h2-abuse.ts names: the control flood is counted here;
 * rapid reset and protocol errors are ended by the runtime's HTTP/2 framing (nghttp2), which reports them
 * as session errors. Over TLS the runtime may also end a control flood first, when the answers it has
 * queued pile up ("Flooding was detected"). Any other session error (a caller that went away) is not abuse.
 */
import http2 from "node:http2";
import { budget, CONTROL_BURST, CONTROL_RATE, type H2Abuse } from "../h2-abuse.ts";

const { NGHTTP2_ENHANCE_YOUR_CALM } = http2.constants;

/**
 * Watches one caller session: `ended` is told of abuse, and the session is destroyed (by the runtime, or
 * here for a control flood). The connection under it is the listener's to close when the session does.
 */
export function guardSession(
  session: http2.Http2Session,
  ended: (reason: H2Abuse, detail: string) => void,
): void {
  const controls = budget(CONTROL_BURST, CONTROL_RATE);
  let over = false;
  const control = () => {
    if (over || controls.take()) return;
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
