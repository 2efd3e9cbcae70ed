import { emptyParts, type HeadParts, latin1, readRequestHead } from "./head-bytes.ts";
import {
  type BodyEvent,
  type Event,
  FAILED,
  type Fields,
  type Framing,
  framing,
  MessageFramer,
  MessageHead,
  type MessageSink,
  MORE,
  PROGRESS,
  scanFields,
} from "./wire.ts";

/**
 * Incremental HTTP/1.1 request framing (RFC 9112) for a relay that parses only what it must: each
 * request's head (to rewrite headers) and where its body ends (to find the next request on a kept-alive
 * or pipelined connection). Body bytes are handed on as they arrive, never buffered whole.
 *
 * Strict where leniency enables request smuggling: bare LF line endings, obsolete line folding, whitespace
 * before a header colon, control characters in values, Transfer-Encoding together with Content-Length, a
 * Transfer-Encoding other than chunked, and unparsable or conflicting Content-Length values are all
 * refused.
 */
export class RequestHead extends MessageHead {
  constructor(
    readonly method: string,
    /** The target, or undefined when it is read from the head's bytes at targetStart..targetEnd on use. */
    private targetText: string | undefined,
    private readonly targetStart: number,
    private readonly targetEnd: number,
    readonly version: "HTTP/1.1" | "HTTP/1.0",
    special: Fields,
    src: Buffer,
    start: number,
    end: number,
    body: Framing,
    from: number,
  ) {
    super(special, src, start, end, body, from);
  }

  /** The head the byte reader read into `p`. */
  static fromParts(p: HeadParts, src: Buffer, start: number, end: number): RequestHead {
    return new RequestHead(
      p.method,
      undefined,
      p.targetStart,
      p.targetEnd,
      p.version,
      p.special,
      src,
      start,
      end,
      NONE,
      p.from,
    );
  }

  get target(): string {
    this.targetText ??= latin1(this.src, this.start + this.targetStart, this.start + this.targetEnd);
    return this.targetText;
  }
}

export type FramerEvent = Event<RequestHead> | BodyEvent;

// The target: origin form (/path), absolute form (http://host/path), authority form (host:port, for
// CONNECT) or * (OPTIONS); visible characters only.
const REQUEST_LINE =
  /^([!#$%&'*+\-.^_`|~0-9A-Za-z]+) ((?:\/|https?:\/\/)[\x21-\x7e\x80-\xff]*|[\w.\-[\]:]+:\d{1,5}|\*) (HTTP\/1\.[01])$/;

/** Whether a request line of `method` and `target` is one this reader accepts (the HTTP/2 relay's rule too). */
export const requestLineAllows = (method: string, target: string): boolean =>
  REQUEST_LINE.test(`${method} ${target} HTTP/1.1`);

export class RequestFramer extends MessageFramer<RequestHead> {
  private readonly parts = emptyParts();

  protected head(sink: MessageSink<RequestHead>): number {
    // Empty lines before a request line are ignored (RFC 9112 section 2.2).
    while (this.buf.length >= 2 && this.buf.startsWithCrlf()) this.buf.skip(2);
    const end = this.buf.headEnd();
    if (end < 0) {
      if (this.buf.length > this.maxHeadBytes)
        return fail(sink, 431, `request head larger than ${this.maxHeadBytes} bytes`);
      if (this.buf.hasBareLf()) return fail(sink, 400, "bare LF line ending");
      return MORE;
    }
    const src = this.buf.bytes;
    const start = this.buf.start;
    this.buf.skip(end + 4 - start);
    if (end - start > this.maxHeadBytes)
      return fail(sink, 431, `request head larger than ${this.maxHeadBytes} bytes`);
    const p = this.parts;
    const head = readRequestHead(src, start, end, p)
      ? RequestHead.fromParts(p, src, start, end)
      : readRequestText(src, start, end);
    if (!(head instanceof RequestHead)) return fail(sink, head.status, head.error);
    const f = framing(head.special, NONE);
    if ("error" in f) return fail(sink, f.status, f.error);
    head.body = f;
    sink.head(head);
    if (f.kind === "none") sink.end();
    else this.body = this.reader.start(f);
    return PROGRESS;
  }
}

/** A head the byte reader left to the string reader: read, or refused with the reason. */
export function readRequestText(
  src: Buffer,
  start: number,
  end: number,
): RequestHead | { status: 400; error: string } {
  const text = src.toString("latin1", start, end);
  const eol = text.indexOf("\r\n");
  const requestLine = eol < 0 ? text : text.slice(0, eol);
  if (requestLine.includes("\n")) return { status: 400, error: "bare LF line ending" };
  const rl = REQUEST_LINE.exec(requestLine);
  if (!rl) return { status: 400, error: `invalid request line ${JSON.stringify(requestLine.slice(0, 100))}` };
  const from = eol < 0 ? text.length : eol + 2;
  const special = scanFields(text, from);
  if ("error" in special) return { status: 400, error: special.error };
  const version = rl[3] as RequestHead["version"];
  return new RequestHead(
    rl[1] as string,
    rl[2] as string,
    0,
    0,
    version,
    special,
    src,
    start,
    end,
    NONE,
    from,
  );
}

const NONE: Framing = { kind: "none" };

function fail(sink: MessageSink<unknown>, status: 400 | 431 | 501, reason: string): number {
  sink.error(status, reason);
  return FAILED;
}
