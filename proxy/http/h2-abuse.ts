/**
 * What ends a caller's HTTP/2 connection for abuse, on both HTTP/2 paths (docs/proxy-http.md, "Limits"),
 * and the budgets written once for both:
 * - `control_flood`: PING and SETTINGS frames beyond a budget of CONTROL_BURST, refilled at CONTROL_RATE
 *   a second. Each must be answered; a caller that sends them faster than any keepalive would is ended
 *   with GOAWAY ENHANCE_YOUR_CALM.
 * - `rapid_reset`: streams the caller opens and resets before their answers end, beyond a budget of
 *   RESET_BURST refilled at RESET_RATE a second (nghttp2's defaults, which the full path's runtime
 *   applies): GOAWAY ENHANCE_YOUR_CALM. On the relay, streams reset for the caller's errors on them and
 *   streams the target resets before it answered in full (but for REFUSED_STREAM) count too.
 * - `protocol_error`: a frame the proxy cannot accept, among them a header block continued without end by
 *   CONTINUATION frames.
 */
export type H2Abuse = "control_flood" | "rapid_reset" | "protocol_error";

export const CONTROL_BURST = 1000;
export const CONTROL_RATE = 100;
export const RESET_BURST = 1000;
export const RESET_RATE = 33;

/** A token bucket: `take()` is false once more than `burst` were taken faster than `rate` a second. */
export function budget(burst: number, rate: number): { take(): boolean } {
  let tokens = burst;
  let last = performance.now();
  return {
    take() {
      const now = performance.now();
      tokens = Math.min(burst, tokens + ((now - last) / 1000) * rate);
      last = now;
      return --tokens >= 0;
    },
  };
}
