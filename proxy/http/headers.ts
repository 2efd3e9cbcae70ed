/**
 * The header policy of both HTTP paths (the relay, proxy/http/relay/, and the full path,
 * proxy/http/full/), as a forwarding proxy applies it (RFC 9110 section 7.6.1):
 *
 * - hop-by-hop fields, and any field that Connection names, are not passed on in either direction;
 * - on requests the proxy writes Svc-Peer-ID itself (a caller's own never passes, nor one spelled with
 *   underscores, which CGI and WSGI targets read as the same field) and appends the caller's address to
 *   X-Forwarded-For;
 * - a request keeps the caller's X-Request-Id, or is given a new one (also when its Connection field names
 *   the caller's, which was then meant for one hop only).
 *
 * The names are data here, once: the relay's readers of heads (wire/wire.ts as text, wire/head-bytes.ts
 * as bytes) pick out RELAY_FIELDS and the `proxy-` fields, the full path reads node:http's objects, and
 * all apply passesOn (tests/unit/header-policy.test.ts runs the same heads through each). Names are
 * lower case, as every path compares them.
 */
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from "node:http";
import type { ProxyRequest } from "./types.ts";

const HOP_BY_HOP_NAMES = [
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authenticate",
  "proxy-authentication-info",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
] as const;
const HOP_BY_HOP: ReadonlySet<string> = new Set(HOP_BY_HOP_NAMES);

/** Fields HTTP/2 has no place for (RFC 9113 8.2.2): a request that carries one is malformed. */
export const CONNECTION_SPECIFIC: ReadonlySet<string> = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "upgrade",
]);

/** The request field that tells the target who called (server and central modes). */
export const PEER_ID_HEADER = "svc-peer-id";
export const REQUEST_ID_HEADER = "x-request-id";
export const FORWARDED_FOR_HEADER = "x-forwarded-for";

/** Fields whose names start so are picked out by the relay's readers too (Proxy-Connection and the like). */
export const PROXY_PREFIX = "proxy-";

/**
 * The fields the relay's readers pick out of a head (the others are passed on unread): the hop-by-hop
 * ones (those starting with PROXY_PREFIX are picked out by the prefix), the body's framing, and those the
 * proxy writes or keeps. Svc-Peer-ID is also picked out in its spellings with underscores.
 */
export const RELAY_FIELDS: readonly string[] = [
  ...new Set([
    ...HOP_BY_HOP_NAMES.filter((n) => !n.startsWith(PROXY_PREFIX)),
    "content-length",
    "transfer-encoding",
    PEER_ID_HEADER,
    FORWARDED_FOR_HEADER,
    REQUEST_ID_HEADER,
  ]),
];

/** Request fields the proxy writes itself: what a caller sent under these names is replaced or merged. */
const WRITTEN_ON_REQUESTS: ReadonlySet<string> = new Set([PEER_ID_HEADER, FORWARDED_FOR_HEADER]);

/** Svc-Peer-ID with any of its hyphens written as underscores (`key` in lower case). */
const isPeerIdSpelling = (key: string): boolean =>
  key.length === 11 && key.replaceAll("_", "-") === PEER_ID_HEADER;

/** No Connection tokens: shared, never added to. */
export const NO_TOKENS: ReadonlySet<string> = new Set();

/** The tokens of a Connection field's values, lower case (NO_TOKENS when there are none). */
export function connectionTokens(values: readonly string[] | undefined): ReadonlySet<string> {
  if (!values?.length) return NO_TOKENS;
  const out = new Set<string>();
  for (const value of values)
    for (const t of value.split(",")) {
      const token = t.trim().toLowerCase();
      if (token) out.add(token);
    }
  return out;
}

/** The tokens of a node:http head's Connection field. */
export function namedBy(headers: IncomingHttpHeaders | OutgoingHttpHeaders): ReadonlySet<string> {
  const c = headers.connection;
  return connectionTokens(c === undefined ? undefined : Array.isArray(c) ? c : [String(c)]);
}

/**
 * Whether a field (`key` in lower case) is passed on as the peer sent it. `named`: the tokens of the
 * message's Connection field; `request`: the message goes to the target.
 */
export function passesOn(key: string, named: ReadonlySet<string>, request: boolean): boolean {
  return (
    !HOP_BY_HOP.has(key) &&
    !named.has(key) &&
    !(request && (WRITTEN_ON_REQUESTS.has(key) || isPeerIdSpelling(key)))
  );
}

/**
 * The X-Request-Id of a request: the caller's, or a new one. A caller's that its Connection field names
 * was meant for one hop only, and is not kept (`named`: the Connection tokens).
 */
export function requestId(fromCaller: string | undefined, named: ReadonlySet<string>): string {
  return (named.has(REQUEST_ID_HEADER) ? undefined : fromCaller) ?? crypto.randomUUID();
}

/** X-Forwarded-For after the proxy: what the caller sent (if anything), then the caller's address. */
export function forwardedFor(prior: string | undefined, remoteAddress: string): string {
  return prior ? `${prior}, ${remoteAddress}` : remoteAddress;
}

/** The full path's copy of a node:http head: only what passes on (HTTP/2 pseudo-fields never do). */
export function endToEnd(
  headers: IncomingHttpHeaders | OutgoingHttpHeaders,
  request: boolean,
  named = namedBy(headers),
): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const [k, v] of Object.entries(headers)) {
    const key = k.toLowerCase();
    if (v === undefined || key.startsWith(":") || !passesOn(key, named, request)) continue;
    out[key] = v;
  }
  return out;
}

/**
 * The full path's request fields for the target: what passes on, then the proxy's own Svc-Peer-ID,
 * X-Request-Id and X-Forwarded-For, written after it so that a caller's Connection field cannot remove
 * them.
 */
export function requestFields(req: ProxyRequest): OutgoingHttpHeaders {
  const named = namedBy(req.headers);
  const headers = endToEnd(req.headers, true, named);
  if (req.peer) headers[PEER_ID_HEADER] = req.peer.uri;
  headers[REQUEST_ID_HEADER] = req.id;
  const prior = named.has(FORWARDED_FOR_HEADER) ? undefined : req.headers[FORWARDED_FOR_HEADER];
  headers[FORWARDED_FOR_HEADER] = forwardedFor(
    prior === undefined ? undefined : Array.isArray(prior) ? prior.join(", ") : prior,
    req.remoteAddress,
  );
  return headers;
}
