import {
  type BodyEvent,
  BodyReader,
  type Fields,
  type Framing,
  framing,
  MessageFramer,
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
export interface ResponseHead {
  status: number;
  reason: string;
  version: "HTTP/1.1" | "HTTP/1.0";
  /** Every field, in received order (parsed on first use). */
  readonly headers: Fields;
  /** The fields a relay acts on, as received (see RequestHead). */
  special: Fields;
  /** The head as received, without its final CRLFCRLF. */
  raw: Uint8Array;
  interim: boolean;
  /** How the body is framed; none for interim responses, tunnels, HEAD, 204 and 304. */
  body: Framing;
}

export type ResponseEvent = { type: "head"; head: ResponseHead } | BodyEvent | { type: "tunnel" };

const STATUS_LINE = /^(HTTP\/1\.[01]) (\d{3})(?: (.*))?$/;

export class ResponseFramer extends MessageFramer<{ type: "head"; head: ResponseHead } | { type: "tunnel" }> {
  private readonly methods: string[] = [];

  /** A request with this method was sent; its response is the next one not yet framed. */
  expect(method: string): void {
    this.methods.push(method.toUpperCase());
  }

  protected override isFinal(e: ResponseEvent): boolean {
    return e.type === "error" || e.type === "tunnel";
  }

  /** The upstream closed the connection. */
  closed(): ResponseEvent[] {
    if (this.stopped) return [];
    this.stopped = true;
    if (this.body) return this.body.closed();
    return this.buf.length > 0
      ? [{ type: "error", status: 502, reason: "connection closed inside a response head" }]
      : [];
  }

  protected head(): ResponseEvent[] {
    const text = this.buf.head();
    if (text === undefined) {
      if (this.buf.length > this.maxHeadBytes)
        return [error(`response head larger than ${this.maxHeadBytes} bytes`)];
      return [];
    }
    const method = this.methods[0];
    if (method === undefined) return [error("a response arrived without a request")];
    const eol = text.indexOf("\r\n");
    const statusLine = eol < 0 ? text : text.slice(0, eol);
    const sl = STATUS_LINE.exec(statusLine);
    if (!sl) return [error(`invalid status line ${JSON.stringify(statusLine.slice(0, 100))}`)];
    const fields = scanFields(text, eol < 0 ? text.length : eol + 2);
    if ("error" in fields) return [error(fields.error)];
    const status = Number(sl[2]);
    const interim = status >= 100 && status < 200 && status !== 101;
    const h: ResponseHead = {
      status,
      reason: sl[3] ?? "",
      version: sl[1] as ResponseHead["version"],
      special: fields.special,
      get headers() {
        return fields.all();
      },
      raw: this.buf.headBytes,
      interim,
      body: { kind: "none" },
    };
    const head: ResponseEvent = { type: "head", head: h };
    if (interim) return [head];
    this.methods.shift();
    if (status === 101 || (method === "CONNECT" && status >= 200 && status < 300))
      return [head, { type: "tunnel" }];
    if (method === "HEAD" || status === 204 || status === 304) return [head, { type: "end" }];
    const f = framing(fields.special, { kind: "close" });
    if ("error" in f) return [error(f.error)];
    h.body = f;
    if (f.kind === "none") return [head, { type: "end" }];
    this.body = new BodyReader(f, this.maxHeadBytes);
    return [head];
  }
}

// The upstream broke the protocol: the relay answers 502 and closes.
function error(reason: string): ResponseEvent {
  return { type: "error", status: 502, reason };
}
