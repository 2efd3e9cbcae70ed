/**
 * HTTP/1.1 wire pieces shared by the request and response framers: a byte buffer with CRLF line reading,
 * message body framing from the header fields (RFC 9112 section 6), and a body reader for Content-Length,
 * chunked, and close-delimited bodies that hands data on as it arrives.
 */
import { PEER_ID_HEADER, PROXY_PREFIX, RELAY_FIELDS } from "../headers.ts";

export type Fields = [string, string][];
export type Framing =
  | { kind: "none" }
  | { kind: "fixed"; length: number }
  | { kind: "chunked" }
  | { kind: "close" };
export type BodyEvent =
  | { type: "body"; data: Uint8Array }
  | { type: "end" }
  | { type: "error"; status: 400 | 431 | 501 | 502; reason: string };

/**
 * The bytes received and not yet framed: the last chunk (or the chunks a head spans, joined), read from
 * `pos` on. A head's end is searched once per chunk, from where the last search stopped.
 */
export class WireBuffer {
  private buf: Buffer = EMPTY;
  /** Where the unread bytes start in `buf`. */
  private pos = 0;
  /** Where the next search for a head's end starts (in `buf`): bytes before it hold none. */
  private scanned = 0;

  append(chunk: Uint8Array): void {
    const b = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    if (this.pos >= this.buf.length) {
      this.buf = b;
      this.pos = 0;
      this.scanned = 0;
      return;
    }
    this.buf = Buffer.concat([this.buf.subarray(this.pos), b]);
    this.scanned = Math.max(0, this.scanned - this.pos);
    this.pos = 0;
  }

  get length(): number {
    return this.buf.length - this.pos;
  }

  /** The buffer the unread bytes are in, and where they start (for readers of a head in place). */
  get bytes(): Buffer {
    return this.buf;
  }

  get start(): number {
    return this.pos;
  }

  /** Hands the next `n` unread bytes to `sink` as body bytes. */
  give(n: number, sink: MessageSink<unknown>): void {
    const b = this.buf;
    const at = this.pos;
    this.skip(n);
    sink.body(b, at, at + n);
  }

  /** Drops `n` unread bytes. */
  skip(n: number): void {
    this.pos += n;
    if (this.pos >= this.buf.length) this.clear();
  }

  clear(): void {
    this.buf = EMPTY;
    this.pos = 0;
    this.scanned = 0;
  }

  startsWithCrlf(): boolean {
    return this.buf[this.pos] === 13 && this.buf[this.pos + 1] === 10;
  }

  /** A CRLF-ended line: its text, undefined if incomplete, null if longer than `max` or ended by a bare LF. */
  line(max: number): string | null | undefined {
    const i = this.buf.indexOf(CRLF, this.pos);
    if (i < 0) return this.length > max || this.buf.indexOf(10, this.pos) >= 0 ? null : undefined;
    if (i - this.pos > max) return null;
    const text = this.buf.toString("latin1", this.pos, i);
    this.skip(i + 2 - this.pos);
    return text.includes("\n") ? null : text;
  }

  /**
   * Where the head that starts at `start` ends (the index in `bytes` of its CRLFCRLF), or -1 while it is
   * incomplete. The head's bytes stay in place: the reader takes them with `skip`.
   */
  headEnd(): number {
    const i = this.buf.indexOf(CRLFCRLF, Math.max(this.pos, this.scanned - 3));
    this.scanned = i < 0 ? this.buf.length : 0;
    return i;
  }

  hasBareLf(): boolean {
    for (let i = this.buf.indexOf(10, this.pos); i >= 0; i = this.buf.indexOf(10, i + 1))
      if (i === this.pos || this.buf[i - 1] !== 13) return true;
    return false;
  }
}

const EMPTY = Buffer.alloc(0);
const CRLF = Buffer.from("\r\n");
const CRLFCRLF = Buffer.from("\r\n\r\n");

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
// Field values are visible characters, spaces and tabs (RFC 9110 section 5.5); NUL and other controls
// are read differently by different parsers, so they are refused.
// biome-ignore lint/suspicious/noControlCharactersInRegex: these are the characters refused
const CONTROL = /[\x00-\x08\x0a-\x1f\x7f]/;

/** Header field lines to fields; refuses obsolete folding, bare LF, and anything but `token ":" value`. */
function parseFields(lines: string[]): Fields | { error: string } {
  const fields: Fields = [];
  for (const line of lines) {
    if (line.includes("\n")) return { error: "bare LF line ending" };
    if (line.startsWith(" ") || line.startsWith("\t")) return { error: "obsolete line folding" };
    const colon = line.indexOf(":");
    const name = colon > 0 ? line.slice(0, colon) : "";
    if (!TOKEN.test(name)) return { error: `invalid header line ${JSON.stringify(line.slice(0, 100))}` };
    const value = line.slice(colon + 1).trim();
    if (CONTROL.test(value)) return { error: `control character in the value of header ${name}` };
    fields.push([name, value]);
  }
  return fields;
}

// A whole field section (each line ending in CRLF) checked in one pass: `token ":" value` lines whose
// values hold visible characters, spaces and tabs only.
const FIELD_SECTION = /^(?:[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[\t\x20-\x7e\x80-\xff]*\r\n)*$/;
// The fields a relay acts on (headers.ts RELAY_FIELDS, Svc-Peer-ID also with underscores, and `proxy-`
// fields), one line each. Every other field is passed on as received, without being picked apart.
const SPECIAL = new RegExp(
  `^(${RELAY_FIELDS.map((n) => (n === PEER_ID_HEADER ? n.replaceAll("-", "[-_]") : n)).join("|")}|${PROXY_PREFIX}[a-z-]+):[\\t ]*(.*?)[\\t ]*$`,
  "gim",
);

/**
 * The header section of a head (`text` from `from` on: the lines after the start line, without the final
 * CRLFCRLF), checked as parseFields would check it. Returns the fields a relay acts on (names in lower
 * case), or the reason the section is refused. Every other field stays unparsed (see allFields).
 */
export function scanFields(text: string, from: number): Fields | { error: string } {
  const section = from < text.length ? `${text.slice(from)}\r\n` : "";
  if (!FIELD_SECTION.test(section)) {
    const detailed = parseFields(section.slice(0, -2).split("\r\n"));
    return "error" in detailed ? detailed : { error: "invalid header section" };
  }
  const special: Fields = [];
  SPECIAL.lastIndex = 0;
  for (let m = SPECIAL.exec(section); m; m = SPECIAL.exec(section))
    special.push([(m[1] as string).toLowerCase(), m[2] as string]);
  return special;
}

/** What request and response heads share: the fields a relay acts on, the head as received, the body framing. */
export class MessageHead {
  constructor(
    /**
     * The fields a relay acts on (framing, Connection, hop-by-hop, and those the proxy writes): names in
     * lower case, values as received (trimmed).
     */
    readonly special: Fields,
    /** The buffer the head was received in, and where the head is in it (without its final CRLFCRLF). */
    readonly src: Buffer,
    readonly start: number,
    readonly end: number,
    /** How the body is framed (for responses: none for interim ones, tunnels, HEAD, 204 and 304). */
    public body: Framing,
    /** Where the header section starts, from `start`. */
    protected readonly from: number,
  ) {}

  /** Every field, in received order, names as received (parsed on use). */
  get headers(): Fields {
    return allFields(this.src.toString("latin1", this.start, this.end), this.from);
  }
}

/** Every field of a head whose section scanFields accepted, in received order, names as received. */
function allFields(text: string, from: number): Fields {
  return from < text.length ? (parseFields(text.slice(from).split("\r\n")) as Fields) : [];
}

/** A Content-Length value the proxy reads: digits, at most 15 (a length JavaScript holds exactly). */
export const CONTENT_LENGTH = /^\d{1,15}$/;

/**
 * Body framing from the fields (RFC 9112 section 6.3). `otherwise` is what a message with neither field
 * has: no body for a request, a close-delimited body for a response. Transfer-Encoding with
 * Content-Length, codings other than chunked, and unparsable or conflicting lengths are refused.
 */
export function framing(fields: Fields, otherwise: Framing): Framing | { error: string; status: 400 | 501 } {
  // The common shapes first: no framing field, or one plain Content-Length. Names are in lower case.
  let single: string | undefined;
  let count = 0;
  for (const [name, value] of fields) {
    if (name === "content-length") {
      count++;
      single = value;
    } else if (name === "transfer-encoding") {
      count++;
      single = undefined;
    }
  }
  if (count === 0) return otherwise;
  if (count === 1 && single !== undefined && CONTENT_LENGTH.test(single)) {
    const length = Number(single);
    return length === 0 ? { kind: "none" } : { kind: "fixed", length };
  }
  const te = fields.filter(([n]) => n === "transfer-encoding").map(([, v]) => v);
  const cl = fields.filter(([n]) => n === "content-length").map(([, v]) => v);
  if (te.length > 0 && cl.length > 0)
    return { error: "both Transfer-Encoding and Content-Length", status: 400 };
  if (te.length > 0) {
    const codings = te
      .join(",")
      .split(",")
      .map((c) => c.trim().toLowerCase())
      .filter(Boolean);
    if (codings.length !== 1 || codings[0] !== "chunked") {
      return {
        error: `unsupported Transfer-Encoding ${JSON.stringify(te.join(", "))} (only chunked)`,
        status: 501,
      };
    }
    return { kind: "chunked" };
  }
  if (cl.length > 0) {
    const values = new Set(
      cl
        .join(",")
        .split(",")
        .map((v) => v.trim()),
    );
    const [only] = values;
    if (values.size !== 1 || !only || !CONTENT_LENGTH.test(only))
      return { error: `invalid Content-Length ${JSON.stringify(cl.join(", "))}`, status: 400 };
    const length = Number(only);
    return length === 0 ? { kind: "none" } : { kind: "fixed", length };
  }
  return otherwise;
}

/** Where a framer delivers what it frames, as it frames it (no event objects on the hot path). */
export interface MessageSink<Head> {
  head(head: Head): void;
  /** Body bytes: `src[start..end)`. The buffer is the one received; it is never written to. */
  body(src: Buffer, start: number, end: number): void;
  end(): void;
  /** Final: nothing more is framed on this connection. */
  error(status: 400 | 431 | 501 | 502, reason: string): void;
  /** Final (responses only): the connection stopped carrying HTTP. */
  tunnel?(): void;
}

const FIXED = 0;
const CHUNK_SIZE = 1;
const CHUNK_DATA = 2;
const CHUNK_CRLF = 3;
const TRAILERS = 4;
const CLOSE = 5;
/** What BodyReader.step did: nothing (needs more bytes), some progress, or a final error. */
export const MORE = 0;
export const PROGRESS = 1;
export const FAILED = 2;

/** Reads one message body from the buffer, handing data to the sink as it arrives (one per framer, reused). */
export class BodyReader {
  private mode = FIXED;
  private remaining = 0;
  /** True once the body has ended; the buffer then holds the next message's bytes. */
  done = false;

  constructor(private readonly maxLineBytes: number) {}

  /** Starts reading a body framed as `f`. */
  start(f: Exclude<Framing, { kind: "none" }>): this {
    this.mode = f.kind === "fixed" ? FIXED : f.kind === "chunked" ? CHUNK_SIZE : CLOSE;
    this.remaining = f.kind === "fixed" ? f.length : 0;
    this.done = false;
    return this;
  }

  step(buf: WireBuffer, sink: MessageSink<unknown>): number {
    switch (this.mode) {
      case CLOSE:
        if (buf.length === 0) return MORE;
        buf.give(buf.length, sink);
        return PROGRESS;
      case FIXED:
      case CHUNK_DATA: {
        if (buf.length === 0) return MORE;
        const n = Math.min(this.remaining, buf.length);
        this.remaining -= n;
        buf.give(n, sink);
        if (this.remaining > 0) return PROGRESS;
        if (this.mode === CHUNK_DATA) this.mode = CHUNK_CRLF;
        else {
          this.done = true;
          sink.end();
        }
        return PROGRESS;
      }
      case CHUNK_SIZE: {
        const line = buf.line(4096);
        if (line === undefined) return MORE;
        if (line === null) {
          sink.error(400, "chunk size line too long or not ended by CRLF");
          return FAILED;
        }
        const m = /^([0-9A-Fa-f]{1,15})(;.*)?$/.exec(line);
        if (!m) {
          sink.error(400, `invalid chunk size ${JSON.stringify(line)}`);
          return FAILED;
        }
        this.remaining = Number.parseInt(m[1] as string, 16);
        this.mode = this.remaining === 0 ? TRAILERS : CHUNK_DATA;
        return PROGRESS;
      }
      case CHUNK_CRLF: {
        if (buf.length < 2) return MORE;
        if (!buf.startsWithCrlf()) {
          sink.error(400, "chunk data not followed by CRLF");
          return FAILED;
        }
        buf.skip(2);
        this.mode = CHUNK_SIZE;
        return PROGRESS;
      }
      default: {
        const line = buf.line(this.maxLineBytes);
        if (line === undefined) return MORE;
        if (line === null) {
          sink.error(431, "trailer section too large or not ended by CRLF");
          return FAILED;
        }
        if (line !== "") return PROGRESS; // trailer fields are consumed, not forwarded
        this.done = true;
        sink.end();
        return PROGRESS;
      }
    }
  }

  /** The connection closed: a close-delimited body ends; any other unfinished body was truncated. */
  closed(sink: MessageSink<unknown>): void {
    if (this.done) return;
    this.done = true;
    if (this.mode === CLOSE) sink.end();
    else sink.error(502, "connection closed before the end of the body");
  }
}

/**
 * The shared drive loop of the request and response framers: parse a head, then its body, then the next
 * head, for as long as the buffered bytes allow. A final call (an error; for responses also a tunnel)
 * stops framing on the connection for good.
 */
export abstract class MessageFramer<Head> {
  protected readonly buf = new WireBuffer();
  /** The body being read, if any: `reader`, started for it. */
  protected body: BodyReader | undefined;
  protected readonly reader: BodyReader;
  protected stopped = false;

  constructor(protected readonly maxHeadBytes = 65_536) {
    this.reader = new BodyReader(maxHeadBytes);
  }

  /** Bytes received and not yet framed (a head still arriving). */
  get buffered(): number {
    return this.buf.length;
  }

  /** Between messages with nothing left over, and still framing: the connection can carry another. */
  get atRest(): boolean {
    // A reader that is done is let go of after the sink heard the end: the pool asks from within it.
    return !this.stopped && (this.body === undefined || this.body.done) && this.buf.length === 0;
  }

  /** Parses the next head if it is complete (MORE, PROGRESS or FAILED); may start `this.body`. */
  protected abstract head(sink: MessageSink<Head>): number;

  /** Feeds received bytes; the sink hears what they complete, in order. */
  feed(chunk: Uint8Array, sink: MessageSink<Head>): void {
    if (this.stopped) return;
    this.buf.append(chunk);
    for (;;) {
      const reader = this.body;
      const r = reader ? reader.step(this.buf, sink as MessageSink<unknown>) : this.head(sink);
      if (r === FAILED || this.stopped) {
        this.stopped = true;
        this.buf.clear();
        return;
      }
      if (reader?.done) this.body = undefined;
      else if (r === MORE) return;
    }
  }
}

/** What a sink hears, as a value: the relay queues a caller's requests as these. */
export type Event<Head> = { type: "head"; head: Head } | { type: "tunnel" };
