import {
  type BodyEvent,
  BodyReader,
  type Event,
  FAILED,
  type Fields,
  type Framing,
  framing,
  isToken,
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
    readonly target: string,
    readonly version: "HTTP/1.1" | "HTTP/1.0",
    special: Fields,
    raw: Uint8Array,
    body: Framing,
    text: string,
    from: number,
  ) {
    super(special, raw, body, text, from);
  }
}

export type FramerEvent = Event<RequestHead> | BodyEvent;

// The target: origin form (/path), absolute form (http://host/path), authority form (host:port, for
// CONNECT) or * (OPTIONS); visible characters only.
const REQUEST_LINE =
  /^([!#$%&'*+\-.^_`|~0-9A-Za-z]+) ((?:\/|https?:\/\/)[\x21-\x7e\x80-\xff]*|[\w.\-[\]:]+:\d{1,5}|\*) (HTTP\/1\.[01])$/;

export class RequestFramer extends MessageFramer<RequestHead> {
  protected head(sink: MessageSink<RequestHead>): number {
    // Empty lines before a request line are ignored (RFC 9112 section 2.2).
    while (this.buf.length >= 2 && this.buf.startsWithCrlf()) this.buf.take(2);
    const text = this.buf.head();
    if (text === undefined) {
      if (this.buf.length > this.maxHeadBytes)
        return fail(sink, 431, `request head larger than ${this.maxHeadBytes} bytes`);
      if (this.buf.hasBareLf()) return fail(sink, 400, "bare LF line ending");
      return MORE;
    }
    if (text.length > this.maxHeadBytes)
      return fail(sink, 431, `request head larger than ${this.maxHeadBytes} bytes`);
    const eol = text.indexOf("\r\n");
    const requestLine = eol < 0 ? text : text.slice(0, eol);
    if (requestLine.includes("\n")) return fail(sink, 400, "bare LF line ending");
    const rl = REQUEST_LINE.exec(requestLine);
    if (!rl || !isToken(rl[1] as string))
      return fail(sink, 400, `invalid request line ${JSON.stringify(requestLine.slice(0, 100))}`);
    const from = eol < 0 ? text.length : eol + 2;
    const special = scanFields(text, from);
    if ("error" in special) return fail(sink, 400, special.error);
    const f = framing(special, NONE);
    if ("error" in f) return fail(sink, f.status, f.error);
    const version = rl[3] as RequestHead["version"];
    sink.head(
      new RequestHead(rl[1] as string, rl[2] as string, version, special, this.buf.headBytes, f, text, from),
    );
    if (f.kind === "none") sink.end();
    else this.body = new BodyReader(f, this.maxHeadBytes);
    return PROGRESS;
  }
}

const NONE: Framing = { kind: "none" };

function fail(sink: MessageSink<unknown>, status: 400 | 431 | 501, reason: string): number {
  sink.error(status, reason);
  return FAILED;
}
