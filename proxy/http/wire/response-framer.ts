import { emptyParts, type HeadParts, latin1, readResponseHead } from "./head-bytes.ts";
import {
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
 * Incremental HTTP/1.1 response framing (RFC 9112 section 6.3), so that a relay knows each response's
 * status and where it ends without buffering it. Responses come in the order of the requests sent on the
 * connection: `expect(method)` is called for each request forwarded, since the method decides whether a
 * body follows (HEAD) and whether the connection turns into a tunnel (a 2xx to CONNECT).
 *
 * - 1xx (but 101) are interim: another head follows for the same request.
 * - 101 Switching Protocols, and a 2xx to CONNECT, end HTTP on this connection (`tunnel`).
 * - HEAD, 204 and 304 have no body; otherwise chunked, Content-Length, or the body runs to the close.
 */
export class ResponseHead extends MessageHead {
  constructor(
    readonly status: number,
    /** The reason phrase, or undefined when it is read from the head's bytes from reasonStart on use. */
    private reasonText: string | undefined,
    private readonly reasonStart: number,
    readonly version: "HTTP/1.1" | "HTTP/1.0",
    special: Fields,
    src: Buffer,
    start: number,
    end: number,
    readonly interim: boolean,
    body: Framing,
    from: number,
  ) {
    super(special, src, start, end, body, from);
  }

  get reason(): string {
    if (this.reasonText === undefined) {
      // The status line ends at the header section's CRLF, or at the head's end when it has no fields.
      const eol = this.start + this.from === this.end ? this.end : this.start + this.from - 2;
      this.reasonText = this.reasonStart < 0 ? "" : latin1(this.src, this.start + this.reasonStart, eol);
    }
    return this.reasonText;
  }
}

const STATUS_LINE = /^(HTTP\/1\.[01]) (\d{3})(?: (.*))?$/;
const NONE: Framing = { kind: "none" };
const CLOSE: Framing = { kind: "close" };

export class ResponseFramer extends MessageFramer<ResponseHead> {
  private readonly methods: string[] = [];
  /** What the head being read holds (reused from head to head). */
  private readonly parts: HeadParts & { reasonText?: string } = emptyParts();

  /** A request with this method was sent; its response is the next one not yet framed. */
  expect(method: string): void {
    this.methods.push(method);
  }

  /** The upstream closed the connection. */
  closed(sink: MessageSink<ResponseHead>): void {
    if (this.stopped) return;
    this.stopped = true;
    if (this.body) this.body.closed(sink as MessageSink<unknown>);
    else if (this.buf.length > 0) sink.error(502, "connection closed inside a response head");
  }

  protected head(sink: MessageSink<ResponseHead>): number {
    const end = this.buf.headEnd();
    if (end < 0) {
      if (this.buf.length > this.maxHeadBytes)
        return fail(sink, `response head larger than ${this.maxHeadBytes} bytes`);
      return MORE;
    }
    const src = this.buf.bytes;
    const start = this.buf.start;
    this.buf.skip(end + 4 - start);
    const method = this.methods[0];
    if (method === undefined) return fail(sink, "a response arrived without a request");
    const p = this.parts;
    p.reasonText = undefined;
    const read = readResponseHead(src, start, end, p)
      ? p
      : readResponseText(src.toString("latin1", start, end), p);
    if (typeof read === "string") return fail(sink, read);
    const status = p.status;
    const interim = status >= 100 && status < 200 && status !== 101;
    const h = new ResponseHead(
      status,
      p.reasonText,
      p.reasonStart,
      p.version,
      p.special,
      src,
      start,
      end,
      interim,
      NONE,
      p.from,
    );
    if (interim) {
      sink.head(h);
      return PROGRESS;
    }
    this.methods.shift();
    if (status === 101 || (method.toUpperCase() === "CONNECT" && status >= 200 && status < 300)) {
      sink.head(h);
      sink.tunnel?.();
      return FAILED;
    }
    if (method.toUpperCase() === "HEAD" || status === 204 || status === 304) {
      sink.head(h);
      sink.end();
      return PROGRESS;
    }
    const f = framing(p.special, CLOSE);
    if ("error" in f) return fail(sink, f.error);
    h.body = f;
    sink.head(h);
    if (f.kind === "none") sink.end();
    else this.body = this.reader.start(f);
    return PROGRESS;
  }
}

/** A head the byte reader left to the string reader: its parts, or why it is refused. */
export function readResponseText(text: string, p: HeadParts & { reasonText?: string }): HeadParts | string {
  const eol = text.indexOf("\r\n");
  const statusLine = eol < 0 ? text : text.slice(0, eol);
  const sl = STATUS_LINE.exec(statusLine);
  if (!sl) return `invalid status line ${JSON.stringify(statusLine.slice(0, 100))}`;
  const from = eol < 0 ? text.length : eol + 2;
  const special = scanFields(text, from);
  if ("error" in special) return special.error;
  p.special = special;
  p.status = Number(sl[2]);
  p.version = sl[1] as ResponseHead["version"];
  p.reasonText = sl[3] ?? "";
  p.from = from;
  return p;
}

// The upstream broke the protocol: the relay answers 502 and closes.
function fail(sink: MessageSink<unknown>, reason: string): number {
  sink.error(502, reason);
  return FAILED;
}
