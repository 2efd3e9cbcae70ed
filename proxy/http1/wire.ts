/**
 * HTTP/1.1 wire pieces shared by the request and response framers: a byte buffer with CRLF line reading,
 * message body framing from the header fields (RFC 9112 section 6), and a body reader for Content-Length,
 * chunked, and close-delimited bodies that hands data on as it arrives.
 */
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

export class WireBuffer {
  private buf: Buffer = Buffer.alloc(0);

  append(chunk: Uint8Array): void {
    if (this.buf.length === 0) {
      this.buf = Buffer.isBuffer(chunk)
        ? chunk
        : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
      return;
    }
    this.buf = Buffer.concat([this.buf, chunk]);
  }

  get length(): number {
    return this.buf.length;
  }

  take(n: number): Uint8Array {
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }

  clear(): void {
    this.buf = Buffer.alloc(0);
  }

  startsWithCrlf(): boolean {
    return this.buf[0] === 13 && this.buf[1] === 10;
  }

  /** A CRLF-ended line: its text, undefined if incomplete, null if longer than `max` or ended by a bare LF. */
  line(max: number): string | null | undefined {
    const i = this.buf.indexOf(CRLF);
    if (i < 0) return this.buf.length > max || this.buf.includes(10) ? null : undefined;
    if (i > max) return null;
    const text = this.buf.toString("latin1", 0, i);
    this.buf = this.buf.subarray(i + 2);
    return text.includes("\n") ? null : text;
  }

  /** The bytes of the last head(), without the final CRLFCRLF. */
  headBytes: Uint8Array = new Uint8Array(0);

  /** The head up to its blank line, as text without the final CRLFCRLF; undefined if incomplete. */
  head(): string | undefined {
    const end = this.buf.indexOf(CRLFCRLF);
    if (end < 0) return undefined;
    const text = this.buf.toString("latin1", 0, end);
    this.headBytes = this.buf.subarray(0, end);
    this.buf = this.buf.subarray(end + 4);
    return text;
  }

  hasBareLf(): boolean {
    for (let i = this.buf.indexOf(10); i >= 0; i = this.buf.indexOf(10, i + 1))
      if (i === 0 || this.buf[i - 1] !== 13) return true;
    return false;
  }
}

const CRLF = Buffer.from("\r\n");
const CRLFCRLF = Buffer.from("\r\n\r\n");

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
// Field values are visible characters, spaces and tabs (RFC 9110 section 5.5); NUL and other controls
// are read differently by different parsers, so they are refused.
// biome-ignore lint/suspicious/noControlCharactersInRegex: these are the characters refused
const CONTROL = /[\x00-\x08\x0a-\x1f\x7f]/;

/** Header field lines to fields; refuses obsolete folding, bare LF, and anything but `token ":" value`. */
export function parseFields(lines: string[]): Fields | { error: string } {
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

export const isToken = (s: string) => TOKEN.test(s);

// A whole field section (each line ending in CRLF) checked in one pass: `token ":" value` lines whose
// values hold visible characters, spaces and tabs only.
const FIELD_SECTION = /^(?:[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[\t\x20-\x7e\x80-\xff]*\r\n)*$/;
// The fields a relay acts on: framing, Connection and the other hop-by-hop fields, and the ones the proxy
// writes itself. Every other field is passed on as received, without being picked apart.
const SPECIAL =
  /^(connection|content-length|transfer-encoding|keep-alive|proxy-[a-z-]+|te|trailer|upgrade|svc-peer-id|x-forwarded-for|x-request-id):[\t ]*(.*?)[\t ]*$/gim;

/**
 * The header section of a head (the lines after the start line, without the final CRLFCRLF): checked
 * as parseFields would, and the fields a relay acts on picked out. `all()` parses every field, on demand.
 */
export interface FieldSection {
  special: Fields;
  all(): Fields;
}

export function scanFields(text: string, from: number): FieldSection | { error: string } {
  const section = from < text.length ? `${text.slice(from)}\r\n` : "";
  const lines = () => (section ? section.slice(0, -2).split("\r\n") : []);
  if (!FIELD_SECTION.test(section)) {
    const detailed = parseFields(lines());
    return "error" in detailed ? detailed : { error: "invalid header section" };
  }
  const special: Fields = [];
  for (const m of section.matchAll(SPECIAL)) special.push([m[1] as string, m[2] as string]);
  let all: Fields | undefined;
  return {
    special,
    all: () => {
      all ??= parseFields(lines()) as Fields;
      return all;
    },
  };
}

/**
 * Body framing from the fields (RFC 9112 section 6.3). `otherwise` is what a message with neither field
 * has: no body for a request, a close-delimited body for a response. Transfer-Encoding with
 * Content-Length, codings other than chunked, and unparsable or conflicting lengths are refused.
 */
export function framing(fields: Fields, otherwise: Framing): Framing | { error: string; status: 400 | 501 } {
  // The common shapes first: no framing field, or one plain Content-Length.
  let single: string | undefined;
  let count = 0;
  for (const [name, value] of fields) {
    const n = name.length;
    if (
      (n === 14 || n === 17) &&
      (name.toLowerCase() === "content-length" || name.toLowerCase() === "transfer-encoding")
    ) {
      count++;
      single = n === 14 ? value : undefined;
    }
  }
  if (count === 0) return otherwise;
  if (count === 1 && single !== undefined && /^\d{1,15}$/.test(single)) {
    const length = Number(single);
    return length === 0 ? { kind: "none" } : { kind: "fixed", length };
  }
  const te = fields.filter(([n]) => n.toLowerCase() === "transfer-encoding").map(([, v]) => v);
  const cl = fields.filter(([n]) => n.toLowerCase() === "content-length").map(([, v]) => v);
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
    if (values.size !== 1 || !only || !/^\d{1,15}$/.test(only))
      return { error: `invalid Content-Length ${JSON.stringify(cl.join(", "))}`, status: 400 };
    const length = Number(only);
    return length === 0 ? { kind: "none" } : { kind: "fixed", length };
  }
  return otherwise;
}

type BodyState =
  | { kind: "fixed"; remaining: number }
  | { kind: "chunk-size" }
  | { kind: "chunk-data"; remaining: number }
  | { kind: "chunk-crlf" }
  | { kind: "trailers" }
  | { kind: "close" };

/** Reads one message body from the buffer. `step` returns what it could complete; [] when it needs more. */
export class BodyReader {
  private state: BodyState;

  constructor(
    f: Exclude<Framing, { kind: "none" }>,
    private readonly maxLineBytes: number,
  ) {
    this.state =
      f.kind === "fixed"
        ? { kind: "fixed", remaining: f.length }
        : f.kind === "chunked"
          ? { kind: "chunk-size" }
          : { kind: "close" };
  }

  /** True once the body has ended; the buffer then holds the next message's bytes. */
  done = false;

  step(buf: WireBuffer): BodyEvent[] {
    const s = this.state;
    switch (s.kind) {
      case "close":
        return buf.length === 0 ? [] : [{ type: "body", data: buf.take(buf.length) }];
      case "fixed":
      case "chunk-data": {
        if (buf.length === 0) return [];
        const n = Math.min(s.remaining, buf.length);
        const body: BodyEvent = { type: "body", data: buf.take(n) };
        const remaining = s.remaining - n;
        if (remaining > 0) {
          this.state = { ...s, remaining };
          return [body];
        }
        if (s.kind === "chunk-data") {
          this.state = { kind: "chunk-crlf" };
          return [body];
        }
        this.done = true;
        return [body, { type: "end" }];
      }
      case "chunk-size": {
        const line = buf.line(4096);
        if (line === undefined) return [];
        if (line === null)
          return [{ type: "error", status: 400, reason: "chunk size line too long or not ended by CRLF" }];
        const m = /^([0-9A-Fa-f]{1,15})(;.*)?$/.exec(line);
        if (!m) return [{ type: "error", status: 400, reason: `invalid chunk size ${JSON.stringify(line)}` }];
        const size = Number.parseInt(m[1] as string, 16);
        this.state = size === 0 ? { kind: "trailers" } : { kind: "chunk-data", remaining: size };
        return [];
      }
      case "chunk-crlf": {
        if (buf.length < 2) return [];
        if (!buf.startsWithCrlf())
          return [{ type: "error", status: 400, reason: "chunk data not followed by CRLF" }];
        buf.take(2);
        this.state = { kind: "chunk-size" };
        return [];
      }
      case "trailers": {
        const line = buf.line(this.maxLineBytes);
        if (line === undefined) return [];
        if (line === null)
          return [{ type: "error", status: 431, reason: "trailer section too large or not ended by CRLF" }];
        if (line !== "") return []; // trailer fields are consumed, not forwarded
        this.done = true;
        return [{ type: "end" }];
      }
    }
  }

  /** The connection closed: a close-delimited body ends; any other unfinished body was truncated. */
  closed(): BodyEvent[] {
    if (this.done) return [];
    this.done = true;
    return this.state.kind === "close"
      ? [{ type: "end" }]
      : [{ type: "error", status: 502, reason: "connection closed before the end of the body" }];
  }
}

/**
 * The shared drive loop of the request and response framers: parse a head, then its body, then the next
 * head, for as long as the buffered bytes allow. A final event (an error; for responses also a tunnel)
 * stops framing on the connection for good.
 */
export abstract class MessageFramer<Head extends { type: string }> {
  protected readonly buf = new WireBuffer();
  protected body: BodyReader | undefined;
  protected stopped = false;

  constructor(protected readonly maxHeadBytes = 65_536) {}

  /** Bytes received and not yet framed (a head still arriving). */
  get buffered(): number {
    return this.buf.length;
  }

  /** Parses the next head if it is complete; may start `this.body`. */
  protected abstract head(): (Head | BodyEvent)[];

  protected isFinal(e: Head | BodyEvent): boolean {
    return e.type === "error";
  }

  /** Feeds received bytes; returns what they completed, in order. */
  push(chunk: Uint8Array): (Head | BodyEvent)[] {
    if (this.stopped) return [];
    this.buf.append(chunk);
    const events: (Head | BodyEvent)[] = [];
    for (;;) {
      const length = this.buf.length;
      const reader = this.body;
      const produced = reader ? reader.step(this.buf) : this.head();
      for (const e of produced) {
        events.push(e);
        if (this.isFinal(e)) {
          this.stopped = true;
          this.buf.clear();
          return events;
        }
      }
      if (reader?.done) this.body = undefined;
      // No event, no byte taken, no change of reader: the buffer needs more bytes.
      if (produced.length === 0 && this.buf.length === length && this.body === reader) return events;
    }
  }
}
