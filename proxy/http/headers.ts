import type { IncomingHttpHeaders, OutgoingHttpHeaders } from "node:http";

/**
 * Header handling of a forwarding HTTP proxy (RFC 9110 section 7.6.1): hop-by-hop headers, and any header
 * that Connection names, are not forwarded in either direction. HTTP/2 pseudo-headers are dropped.
 */
export const HOP_BY_HOP = [
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
];

/** The request header that tells the target who called (server and central modes). */
export const PEER_ID_HEADER = "svc-peer-id";

export function endToEnd(headers: IncomingHttpHeaders | OutgoingHttpHeaders): OutgoingHttpHeaders {
  const named = String(headers.connection ?? "")
    .split(",")
    .map((h) => h.trim().toLowerCase())
    .filter(Boolean);
  const out: OutgoingHttpHeaders = {};
  for (const [k, v] of Object.entries(headers)) {
    const key = k.toLowerCase();
    if (v === undefined || key.startsWith(":") || HOP_BY_HOP.includes(key) || named.includes(key)) continue;
    out[key] = v;
  }
  return out;
}

/** Appends the caller's address to X-Forwarded-For, as reverse proxies do. */
export function forwardedFor(headers: OutgoingHttpHeaders, remoteAddress: string): void {
  const prior = headers["x-forwarded-for"];
  headers["x-forwarded-for"] = prior
    ? `${Array.isArray(prior) ? prior.join(", ") : prior}, ${remoteAddress}`
    : remoteAddress;
}
