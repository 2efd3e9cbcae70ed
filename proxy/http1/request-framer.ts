import {
  type BodyEvent,
  BodyReader,
  type Fields,
  type Framing,
  framing,
  isToken,
  MessageFramer,
  scanFields,
} from "./wire.ts";

/**
 * Incremental HTTP/1.1 request framing (RFC 9112) for a relay that parses only what it must: each
 * request's head (to rewrite headers) and where its body ends (to find the next request on a kept-alive
 * or pipelined connection). Body bytes are handed on as they arrive, never buffered whole.
 *
 * Strict where leniency enables request smuggling: bare LF line endings, obsolete line folding, whitespace
 * before a header colon, Transfer-Encoding together with Content-Length, a Transfer-Encoding other than
 * chunked, and unparsable or conflicting Content-Length values are all refused.
 */
export interface RequestHead {
  method: string;
  target: string;
  version: "HTTP/1.1" | "HTTP/1.0";
  /** Every field, in received order, names as received (parsed on first use). */
  readonly headers: Fields;
  /** The fields a relay acts on (framing, Connection, hop-by-hop, and those the proxy writes), as received. */
  special: Fields;
  /** The head as received, without its final CRLFCRLF. */
  raw: Uint8Array;
  /** How the body is framed: none, a Content-Length, or chunked. */
  body: Framing;
}

export type FramerEvent = { type: "head"; head: RequestHead } | BodyEvent;

// The target: origin form (/path), absolute form (http://host/path), authority form (host:port, for
// CONNECT) or * (OPTIONS); visible characters only.
const REQUEST_LINE =
  /^([!#$%&'*+\-.^_`|~0-9A-Za-z]+) ((?:\/|https?:\/\/)[\x21-\x7e\x80-\xff]*|[\w.\-[\]:]+:\d{1,5}|\*) (HTTP\/1\.[01])$/;

export class RequestFramer extends MessageFramer<{ type: "head"; head: RequestHead }> {
  protected head(): FramerEvent[] {
    // Empty lines before a request line are ignored (RFC 9112 section 2.2).
    while (this.buf.length >= 2 && this.buf.startsWithCrlf()) this.buf.take(2);
    const text = this.buf.head();
    if (text === undefined) {
      if (this.buf.length > this.maxHeadBytes)
        return [error(431, `request head larger than ${this.maxHeadBytes} bytes`)];
      if (this.buf.hasBareLf()) return [error(400, "bare LF line ending")];
      return [];
    }
    if (text.length > this.maxHeadBytes)
      return [error(431, `request head larger than ${this.maxHeadBytes} bytes`)];
    const eol = text.indexOf("\r\n");
    const requestLine = eol < 0 ? text : text.slice(0, eol);
    if (requestLine.includes("\n")) return [error(400, "bare LF line ending")];
    const rl = REQUEST_LINE.exec(requestLine);
    if (!rl || !isToken(rl[1] as string))
      return [error(400, `invalid request line ${JSON.stringify(requestLine.slice(0, 100))}`)];
    const fields = scanFields(text, eol < 0 ? text.length : eol + 2);
    if ("error" in fields) return [error(400, fields.error)];
    const f = framing(fields.special, { kind: "none" });
    if ("error" in f) return [error(f.status, f.error)];
    const head: FramerEvent = {
      type: "head",
      head: {
        method: rl[1] as string,
        target: rl[2] as string,
        version: rl[3] as RequestHead["version"],
        special: fields.special,
        get headers() {
          return fields.all();
        },
        raw: this.buf.headBytes,
        body: f,
      },
    };
    if (f.kind === "none") return [head, { type: "end" }];
    this.body = new BodyReader(f, this.maxHeadBytes);
    return [head];
  }
}

function error(status: 400 | 431 | 501, reason: string): FramerEvent {
  return { type: "error", status, reason };
}
