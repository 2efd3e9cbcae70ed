/**
 * The header policy (headers.ts) for a request that arrives as HTTP/2 fields (decoded HPACK), as the
 * HTTP/2 relay applies it, and the same for what the target answers (responses and trailers). HTTP/2
 * has its own rules first (RFC 9113 section 8.2 and 8.3): names and values of the characters allowed
 * (invalidField), pseudo-header fields only the four a request has, each once, before the others, and
 * :method, :scheme and :path present; :method a token and :path in origin form (or `*` for OPTIONS), as
 * the HTTP/1.1 relay reads a request line; :scheme http or https; :authority without userinfo, and a Host
 * that names the same; Content-Length values as the HTTP/1.1 relay reads them (the relay holds the body
 * to that length); connection-specific fields (Connection, Keep-Alive, Proxy-Connection,
 * Transfer-Encoding, Upgrade) and a TE other than "trailers" make a request malformed, which the relay
 * refuses (a stream error, PROTOCOL_ERROR). Then the policy every path applies: a caller's Svc-Peer-ID in
 * any spelling never passes, nor do the other hop-by-hop fields; `te: trailers` is kept (gRPC needs it);
 * Svc-Peer-ID, X-Request-Id (when the caller sent none) and X-Forwarded-For are added.
 */
import type { HeaderField } from "../../lib/http2/hpack.ts";
import {
  CONNECTION_SPECIFIC,
  FORWARDED_FOR_HEADER,
  forwardedFor,
  NO_TOKENS,
  PEER_ID_HEADER,
  passesOn,
  REQUEST_ID_HEADER,
} from "./headers.ts";
import { requestLineAllows } from "./wire/request-framer.ts";
import { type Fields, framing } from "./wire/wire.ts";

const REQUEST_PSEUDO: ReadonlySet<string> = new Set([":method", ":scheme", ":authority", ":path"]);

/** An authority of a URI (RFC 3986 section 3.2) without userinfo: host, and a port after a colon. */
const AUTHORITY = /^[\w\-.~!$&'()*+,;=:[\]%]+$/;

/**
 * Why a field breaks RFC 9113 section 8.2.1, which makes its message malformed, or undefined: a name must
 * be visible ASCII other than upper case letters and colons (a pseudo-header field's leading colon
 * aside); a value may hold no NUL, CR or LF (which an HTTP/1.1 hop further on would read as the end of the
 * field) and may not start or end with a space or tab.
 */
export function invalidField(name: string, value: string): string | undefined {
  const from = name.charCodeAt(0) === 0x3a ? 1 : 0;
  if (name.length === from) return `an empty field name${from ? " after its colon" : ""}`;
  for (let i = from; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if (c >= 0x41 && c <= 0x5a) return `field name ${JSON.stringify(name)} is not in lower case`;
    if (c <= 0x20 || c >= 0x7f || c === 0x3a)
      return `field name ${JSON.stringify(name)} holds a character a name may not (0x${c.toString(16).padStart(2, "0")})`;
  }
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c === 0x00 || c === 0x0a || c === 0x0d)
      return `field ${name}: its value holds 0x${c.toString(16).padStart(2, "0")} (NUL, LF and CR are not allowed)`;
  }
  const first = value.charCodeAt(0);
  const last = value.charCodeAt(value.length - 1);
  if (first === 0x20 || first === 0x09 || last === 0x20 || last === 0x09)
    return `field ${name}: its value starts or ends with a space or tab`;
  return undefined;
}

export interface H2Additions {
  /** The authenticated caller, sent as Svc-Peer-ID (server and central modes). */
  peer: string | undefined;
  /** The X-Request-Id field to add when the caller sent none. */
  newRequestId: () => HeaderField;
  remoteAddress: string;
}

/**
 * The request's fields for the target, or why it is malformed. The request ID (the caller's first
 * X-Request-Id, or a new one) is returned apart from the other fields, and is sent after them: it is the
 * one field that differs in every request, so the relay keeps the encoding of the others for the next
 * request alike (request-cache.ts).
 */
export function callerH2Fields(
  fields: readonly HeaderField[],
  add: H2Additions,
): { fields: HeaderField[]; requestId: HeaderField; contentLength: number } | { malformed: string } {
  const out: HeaderField[] = [];
  const pseudo = new Map<string, string>();
  let regular = false;
  let prior: string | undefined;
  let requestId: HeaderField | undefined;
  let host: string | undefined;
  const lengths: Fields = [];
  for (const f of fields) {
    const name = f.name;
    const invalid = invalidField(name, f.value);
    if (invalid) return { malformed: invalid };
    if (name.startsWith(":")) {
      if (regular) return { malformed: `pseudo-header field ${name} after a regular field` };
      if (!REQUEST_PSEUDO.has(name)) return { malformed: `pseudo-header field ${name} is not a request's` };
      if (pseudo.has(name)) return { malformed: `pseudo-header field ${name} twice` };
      pseudo.set(name, f.value);
      out.push(f);
      continue;
    }
    regular = true;
    if (CONNECTION_SPECIFIC.has(name)) return { malformed: `connection-specific field ${name}` };
    if (name === "te") {
      if (f.value !== "trailers") return { malformed: `te: ${JSON.stringify(f.value)} (only "trailers")` };
      out.push(f);
      continue;
    }
    if (name === FORWARDED_FOR_HEADER) prior = prior === undefined ? f.value : `${prior}, ${f.value}`;
    else if (name === "content-length") lengths.push([name, f.value]);
    else if (name === "host") {
      if (host !== undefined) return { malformed: "host twice" };
      host = f.value;
    }
    if (name === REQUEST_ID_HEADER) requestId ??= f;
    else if (passesOn(name, NO_TOKENS, true)) out.push(f);
  }
  const method = pseudo.get(":method");
  if (method === undefined) return { malformed: "no :method" };
  if (method === "CONNECT") return { malformed: "CONNECT is not supported by this listener" };
  const scheme = pseudo.get(":scheme");
  const path = pseudo.get(":path");
  if (!scheme || !path) return { malformed: "no :scheme or no :path" };
  if (scheme !== "http" && scheme !== "https")
    return { malformed: `:scheme ${JSON.stringify(scheme)} (http or https)` };
  // Origin form, or * for OPTIONS (section 8.3.1); method and characters as an HTTP/1.1 request line.
  if (!(path[0] === "/" || (path === "*" && method === "OPTIONS")) || !requestLineAllows(method, path))
    return {
      malformed: `:method ${JSON.stringify(method)} with :path ${JSON.stringify(path)} (a token, and a path starting with / in visible characters, or * for OPTIONS)`,
    };
  const authority = pseudo.get(":authority");
  if (authority !== undefined) {
    if (!AUTHORITY.test(authority))
      return { malformed: `:authority ${JSON.stringify(authority)} (host[:port], without userinfo)` };
    if (host !== undefined && host.toLowerCase() !== authority.toLowerCase())
      return {
        malformed: `host ${JSON.stringify(host)} differs from :authority ${JSON.stringify(authority)}`,
      };
  }
  let contentLength = -1;
  if (lengths.length > 0) {
    const f = framing(lengths, { kind: "close" });
    if ("error" in f) return { malformed: f.error };
    contentLength = f.kind === "fixed" ? f.length : 0;
  }
  if (add.peer) out.push({ name: PEER_ID_HEADER, value: add.peer });
  out.push({ name: FORWARDED_FOR_HEADER, value: forwardedFor(prior, add.remoteAddress) });
  return { fields: out, requestId: requestId ?? add.newRequestId(), contentLength };
}

/**
 * A response head from the target, for the caller: valid fields, one valid :status and no other
 * pseudo-header field, no connection-specific field; hop-by-hop fields are dropped.
 */
export function targetH2Fields(
  fields: readonly HeaderField[],
): { fields: HeaderField[]; status: number } | { malformed: string } {
  const out: HeaderField[] = [];
  let status: number | undefined;
  let regular = false;
  for (const f of fields) {
    const name = f.name;
    const invalid = invalidField(name, f.value);
    if (invalid) return { malformed: invalid };
    if (name.startsWith(":")) {
      if (name !== ":status" || regular || status !== undefined || !/^[1-9]\d\d$/.test(f.value))
        return { malformed: `pseudo-header field ${name}: ${JSON.stringify(f.value)}` };
      status = Number(f.value);
      out.push(f);
      continue;
    }
    regular = true;
    if (CONNECTION_SPECIFIC.has(name)) return { malformed: `connection-specific field ${name}` };
    if (passesOn(name, NO_TOKENS, false)) out.push(f);
  }
  if (status === undefined) return { malformed: "no :status" };
  return { fields: out, status };
}

/**
 * Trailers, either way (`request`: the caller's, for the target): valid fields, no pseudo-header field,
 * no connection-specific field; hop-by-hop fields, and on requests the fields the proxy writes, are
 * dropped.
 */
export function trailerH2Fields(
  fields: readonly HeaderField[],
  request: boolean,
): { fields: HeaderField[] } | { malformed: string } {
  const out: HeaderField[] = [];
  for (const f of fields) {
    const name = f.name;
    const invalid = invalidField(name, f.value);
    if (invalid) return { malformed: invalid };
    if (name.startsWith(":")) return { malformed: `field ${JSON.stringify(name)} in trailers` };
    if (CONNECTION_SPECIFIC.has(name)) return { malformed: `connection-specific field ${name}` };
    if (passesOn(name, NO_TOKENS, request)) out.push(f);
  }
  return { fields: out };
}
