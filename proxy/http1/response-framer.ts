import {
  type BodyEvent,
  BodyReader,
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
    readonly reason: string,
    readonly version: "HTTP/1.1" | "HTTP/1.0",
    special: Fields,
    raw: Uint8Array,
    readonly interim: boolean,
    body: Framing,
    text: string,
    from: number,
  ) {
    super(special, raw, body, text, from);
  }
}

export type ResponseEvent = Event<ResponseHead> | BodyEvent;

const STATUS_LINE = /^(HTTP\/1\.[01]) (\d{3})(?: (.*))?$/;
const NONE: Framing = { kind: "none" };
const CLOSE: Framing = { kind: "close" };

export class ResponseFramer extends MessageFramer<ResponseHead> {
  private readonly methods: string[] = [];

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

  /** closed(), as events. */
  closedEvents(): ResponseEvent[] {
    const events: ResponseEvent[] = [];
    this.closed({
      head: (head) => events.push({ type: "head", head }),
      body: (data) => events.push({ type: "body", data }),
      end: () => events.push({ type: "end" }),
      error: (status, reason) => events.push({ type: "error", status, reason }),
    });
    return events;
  }

  protected head(sink: MessageSink<ResponseHead>): number {
    const text = this.buf.head();
    if (text === undefined) {
      if (this.buf.length > this.maxHeadBytes)
        return fail(sink, `response head larger than ${this.maxHeadBytes} bytes`);
      return MORE;
    }
    const method = this.methods[0];
    if (method === undefined) return fail(sink, "a response arrived without a request");
    const eol = text.indexOf("\r\n");
    const statusLine = eol < 0 ? text : text.slice(0, eol);
    const sl = STATUS_LINE.exec(statusLine);
    if (!sl) return fail(sink, `invalid status line ${JSON.stringify(statusLine.slice(0, 100))}`);
    const from = eol < 0 ? text.length : eol + 2;
    const special = scanFields(text, from);
    if ("error" in special) return fail(sink, special.error);
    const status = Number(sl[2]);
    const interim = status >= 100 && status < 200 && status !== 101;
    const version = sl[1] as ResponseHead["version"];
    const h = new ResponseHead(
      status,
      sl[3] ?? "",
      version,
      special,
      this.buf.headBytes,
      interim,
      NONE,
      text,
      from,
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
    const f = framing(special, CLOSE);
    if ("error" in f) return fail(sink, f.error);
    h.body = f;
    sink.head(h);
    if (f.kind === "none") sink.end();
    else this.body = new BodyReader(f, this.maxHeadBytes);
    return PROGRESS;
  }
}

// The upstream broke the protocol: the relay answers 502 and closes.
function fail(sink: MessageSink<unknown>, reason: string): number {
  sink.error(502, reason);
  return FAILED;
}
