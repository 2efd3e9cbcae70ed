import { PEER_ID_HEADER, PROXY_PREFIX, RELAY_FIELDS } from "../headers.ts";
import type { Fields } from "./wire.ts";

/**
 * Heads read at the byte level, for the relay's common case (docs/proxy-http.md, "How the relay reads a
 * head"). The start line and the header section are checked byte by byte against the same grammar as the
 * regular expressions of the string reader (request-framer.ts, response-framer.ts, wire.ts), and only
 * the fields a relay acts on are decoded to strings. A head this reader does not accept is read again by
 * the string reader, which accepts or refuses it and names the reason: this reader may only be stricter,
 * never more lenient, and every error is the string reader's (tests/unit/head-bytes.test.ts compares
 * the two on generated and mutated heads).
 */

/** What a start line and header section read to; `false` from a reader: read it as a string instead. */
export interface HeadParts {
  /** The fields a relay acts on: names in lower case, values as received but trimmed. */
  special: Fields;
  /** Offset (from the head's start) of the header section: after the start line's CRLF. */
  from: number;
  /** Request: the method; response: unused. */
  method: string;
  /** Request: the target's offsets (from the head's start). */
  targetStart: number;
  targetEnd: number;
  version: "HTTP/1.1" | "HTTP/1.0";
  /** Response: the status code and the reason's start (from the head's start), -1 when there is none. */
  status: number;
  reasonStart: number;
}

/** No special fields: shared, never written to. */
const NO_FIELDS: Fields = Object.freeze([]) as unknown as Fields;

const table = (chars: string, ...ranges: [number, number][]) => {
  const t = new Uint8Array(256);
  for (let i = 0; i < chars.length; i++) t[chars.charCodeAt(i)] = 1;
  for (const [a, b] of ranges) for (let i = a; i <= b; i++) t[i] = 1;
  return t;
};
const ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/** token characters (RFC 9110 section 5.6.2). */
const TCHAR = table(`!#$%&'*+-.^_\`|~${ALNUM}`);
/** Field value bytes: HTAB, visible characters and SP, obs-text. */
const VALUE = table("\t", [0x20, 0x7e], [0x80, 0xff]);
/** A request target's bytes after its first one (origin and absolute form). */
const TARGET = table("", [0x21, 0x7e], [0x80, 0xff]);
/** Authority form's bytes before the port: word characters, `.`, `-`, `[`, `]`, `:`. */
const AUTHORITY = table(`${ALNUM}_.-[]:`);

const CR = 13;
const LF = 10;
const SP = 32;
const COLON = 58;

const bytesOf = (s: string) => Uint8Array.from(s, (c) => c.charCodeAt(0));
const HTTP_1_ = bytesOf("HTTP/1.");
const HTTP_PREFIX = bytesOf("http://");
const HTTPS_PREFIX = bytesOf("https://");
const PROXY_ = bytesOf(PROXY_PREFIX);
/** The names a relay acts on but `proxy-*` (headers.ts RELAY_FIELDS), lower case, by length, with their text. */
const SPECIAL_BY_LENGTH: [Uint8Array, string][][] = [];
for (const name of RELAY_FIELDS) {
  const list = SPECIAL_BY_LENGTH[name.length] ?? [];
  list.push([bytesOf(name), name]);
  SPECIAL_BY_LENGTH[name.length] = list;
}
/** Methods, decoded once. */
const METHODS = new Map<number, [Uint8Array, string][]>();
for (const m of ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT"]) {
  const list = METHODS.get(m.length) ?? [];
  list.push([bytesOf(m), m]);
  METHODS.set(m.length, list);
}

/** `b[at..]` starts with `s`, exactly. */
function startsWith(b: Uint8Array, at: number, s: Uint8Array): boolean {
  for (let i = 0; i < s.length; i++) if (b[at + i] !== s[i]) return false;
  return true;
}

/**
 * `b[at..]` starts with lower-case `s`, in any case. Only for token bytes: among them, setting bit 0x20
 * changes only A–Z (to a–z), `^` (to `~`) and `_` (to DEL), and no name compared holds `~` or DEL.
 */
function startsWithFolded(b: Uint8Array, at: number, s: Uint8Array): boolean {
  for (let i = 0; i < s.length; i++) if (((b[at + i] as number) | 0x20) !== s[i]) return false;
  return true;
}

const PEER_ID = bytesOf(PEER_ID_HEADER);
const HYPHEN = 0x2d;
const UNDERSCORE = 0x5f;

/**
 * Svc-Peer-ID (11 bytes at `start`) with a hyphen written as an underscore, which CGI and WSGI read as
 * Svc-Peer-ID. Compared byte by byte: most 11-byte names (X-B3-SpanId, Retry-After) differ at once.
 */
function peerIdSpelling(b: Buffer, start: number): boolean {
  let underscore = false;
  for (let i = 0; i < PEER_ID.length; i++) {
    const c = b[start + i] as number;
    const want = PEER_ID[i] as number;
    if (want !== HYPHEN) {
      if ((c | 0x20) !== want) return false;
    } else if (c === UNDERSCORE) underscore = true;
    else if (c !== HYPHEN) return false;
  }
  return underscore;
}

/**
 * A name a relay acts on (wire.ts's SPECIAL), in lower case: one of RELAY_FIELDS, Svc-Peer-ID spelled
 * with underscores, or `proxy-` and letters and hyphens. Undefined for any other name.
 */
function special(b: Buffer, start: number, end: number): string | undefined {
  const n = end - start;
  const list = SPECIAL_BY_LENGTH[n];
  if (list) for (const [bytes, name] of list) if (startsWithFolded(b, start, bytes)) return name;
  if (n === 11 && peerIdSpelling(b, start)) return latin1(b, start, end).toLowerCase();
  if (n <= PROXY_.length || !startsWithFolded(b, start, PROXY_)) return undefined;
  for (let i = start + PROXY_.length; i < end; i++) {
    const c = (b[i] as number) | 0x20;
    if ((c < 97 || c > 122) && c !== 45) return undefined;
  }
  return latin1(b, start, end).toLowerCase();
}

/** Bytes as latin1 text (one character per byte), as the string reader decodes them. */
export function latin1(b: Buffer, start: number, end: number): string {
  if (end - start > 24) return b.toString("latin1", start, end);
  let s = "";
  for (let i = start; i < end; i++) s += String.fromCharCode(b[i] as number);
  return s;
}

/**
 * The header section from `p` to `end` (the head's CRLFCRLF): `token ":" value` lines separated by CRLF,
 * values of VALUE bytes. Fills `out.special`; false where the string reader must judge.
 */
function fields(b: Buffer, p: number, end: number, out: HeadParts): boolean {
  let found: Fields | undefined;
  while (p < end) {
    const name = p;
    while (p < end && TCHAR[b[p] as number] === 1) p++;
    if (p === name || p >= end || b[p] !== COLON) return false;
    const nameEnd = p++;
    const value = p;
    while (p < end && VALUE[b[p] as number] === 1) p++;
    const valueEnd = p;
    if (p < end) {
      if (b[p] !== CR || b[p + 1] !== LF) return false;
      p += 2;
    }
    const known = special(b, name, nameEnd);
    if (known !== undefined) {
      let a = value;
      let z = valueEnd;
      while (a < z && (b[a] === SP || b[a] === 9)) a++;
      while (z > a && (b[z - 1] === SP || b[z - 1] === 9)) z--;
      found ??= [];
      found.push([known, latin1(b, a, z)]);
    }
  }
  out.special = found ?? NO_FIELDS;
  return true;
}

/** HTTP/1.0 or HTTP/1.1 at `p`, ending at `end`. */
function version(b: Uint8Array, p: number, end: number): "HTTP/1.1" | "HTTP/1.0" | undefined {
  if (end - p !== 8 || !startsWith(b, p, HTTP_1_)) return undefined;
  return b[p + 7] === 49 ? "HTTP/1.1" : b[p + 7] === 48 ? "HTTP/1.0" : undefined;
}

/** A request target as the string reader's REQUEST_LINE allows it. */
function target(b: Uint8Array, start: number, end: number): boolean {
  if (end <= start) return false;
  let p: number;
  if (b[start] === 47) p = start + 1;
  else if (startsWith(b, start, HTTP_PREFIX)) p = start + HTTP_PREFIX.length;
  else if (startsWith(b, start, HTTPS_PREFIX)) p = start + HTTPS_PREFIX.length;
  else if (end - start === 1 && b[start] === 42) return true;
  else return authority(b, start, end);
  if (p > end) return false;
  for (; p < end; p++) if (TARGET[b[p] as number] !== 1) return false;
  return true;
}

/** `[\w.\-[\]:]+:\d{1,5}`: the port after the last colon, something before it. */
function authority(b: Uint8Array, start: number, end: number): boolean {
  let colon = -1;
  for (let p = start; p < end; p++) {
    if (AUTHORITY[b[p] as number] !== 1) return false;
    if (b[p] === COLON) colon = p;
  }
  const digits = end - colon - 1;
  if (colon <= start || digits < 1 || digits > 5) return false;
  for (let p = colon + 1; p < end; p++) if ((b[p] as number) < 48 || (b[p] as number) > 57) return false;
  return true;
}

/** The request head `b[start..end)` (without its CRLFCRLF) into `out`; false: read it as a string. */
export function readRequestHead(b: Buffer, start: number, end: number, out: HeadParts): boolean {
  let p = start;
  while (p < end && TCHAR[b[p] as number] === 1) p++;
  if (p === start || p >= end || b[p] !== SP) return false;
  const methodEnd = p++;
  const targetStart = p;
  while (p < end && b[p] !== SP && b[p] !== CR) p++;
  if (p >= end || b[p] !== SP || !target(b, targetStart, p)) return false;
  const targetEnd = p++;
  let eol = p;
  while (eol < end && b[eol] !== CR) eol++;
  const v = version(b, p, eol);
  if (!v) return false;
  if (eol < end && b[eol + 1] !== LF) return false;
  const from = eol < end ? eol + 2 : end;
  if (!fields(b, from, end, out)) return false;
  out.method = method(b, start, methodEnd);
  out.targetStart = targetStart - start;
  out.targetEnd = targetEnd - start;
  out.version = v;
  out.from = from - start;
  return true;
}

function method(b: Buffer, start: number, end: number): string {
  const list = METHODS.get(end - start);
  if (list) for (const [bytes, name] of list) if (startsWith(b, start, bytes)) return name;
  return latin1(b, start, end);
}

/** The response head `b[start..end)` into `out`; false: read it as a string. */
export function readResponseHead(b: Buffer, start: number, end: number, out: HeadParts): boolean {
  let eol = start;
  while (eol < end && b[eol] !== CR && b[eol] !== LF) eol++;
  if (eol < end && (b[eol] !== CR || b[eol + 1] !== LF)) return false;
  const v = eol - start >= 12 ? version(b, start, start + 8) : undefined;
  if (!v || b[start + 8] !== SP) return false;
  let status = 0;
  for (let p = start + 9; p < start + 12; p++) {
    const d = (b[p] as number) - 48;
    if (d < 0 || d > 9) return false;
    status = status * 10 + d;
  }
  let reasonStart = -1;
  if (eol > start + 12) {
    if (b[start + 12] !== SP) return false;
    reasonStart = 13;
  }
  const from = eol < end ? eol + 2 : end;
  if (!fields(b, from, end, out)) return false;
  out.version = v;
  out.status = status;
  out.reasonStart = reasonStart;
  out.from = from - start;
  return true;
}

export function emptyParts(): HeadParts {
  return {
    special: NO_FIELDS,
    from: 0,
    method: "",
    targetStart: 0,
    targetEnd: 0,
    version: "HTTP/1.1",
    status: 0,
    reasonStart: -1,
  };
}
