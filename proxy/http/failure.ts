import { isPeerRefusal, isSvcError } from "../../lib/errors.ts";
import type { ListenerEvents } from "../listener.ts";
import { type ProxyResponse, proxyResponse } from "./types.ts";

/**
 * The 502 for an exchange whose target could not be used, on either HTTP path: refused (the SPIFFE check
 * failed: `failureCode` says why), unreachable, or failed; the text names the target and the cause.
 */
export function upstreamFailure(target: URL, e: Error): ProxyResponse {
  const tls = target.protocol === "https:";
  const where = target.origin;
  if (isPeerRefusal(e))
    return {
      ...proxyResponse(502, `upstream ${where} refused: ${e.message}`, "target-refused"),
      failureCode: e.code,
    };
  // The way to the target failed: a connection or handshake that timed out.
  if (isSvcError(e, "network"))
    return proxyResponse(502, `upstream ${where} unreachable (${e.message})`, "target-unreachable");
  const code = (e as NodeJS.ErrnoException).code;
  if (e.name === "AbortError") return proxyResponse(502, `request to ${where} aborted`, "target-failed");
  // Over TLS 1.3 a server that refuses our client certificate can only reset the connection.
  if (tls && (code === "ECONNRESET" || e.message === "socket hang up")) {
    return proxyResponse(
      502,
      `upstream ${where} closed the connection during or right after the TLS handshake (${code ?? e.message}); it may not allow this proxy's SPIFFE ID (see its log)`,
      "target-unreachable",
    );
  }
  if (code && /^(ECONNREFUSED|ENOTFOUND|EHOSTUNREACH|ENETUNREACH|EAI_AGAIN|ECONNRESET|EPIPE)$/.test(code)) {
    return proxyResponse(502, `upstream ${where} unreachable (${code})`, "target-unreachable");
  }
  return proxyResponse(502, `upstream ${where} failed: ${e.message}`, "target-failed");
}

/** A response made for a target the checks refused is counted in denied_total{side="target"}, once. */
export function countRefusal(events: ListenerEvents | undefined, r: ProxyResponse): void {
  if (r.failure === "target-refused" && r.failureCode) events?.denied("target", r.failureCode);
}
