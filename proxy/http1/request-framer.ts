/**
 * Incremental HTTP/1.1 request framing (RFC 9112) for a relay that parses only what it must: each
 * request's head (to rewrite headers) and where its body ends (to find the next request on a kept-alive
 * or pipelined connection). Body bytes are handed on as they arrive, never buffered whole.
 *
 * Strict where leniency enables request smuggling: bare LF line endings, obsolete line folding, whitespace
 * before a header colon, Transfer-Encoding together with Content-Length, a Transfer-Encoding other than
 * chunked, and unparsable or conflicting Content-Length values are all refused with 400.
 */
export interface RequestHead {
  method: string;
  target: string;
  version: "HTTP/1.1" | "HTTP/1.0";
  /** In received order, names as received. */
  headers: [string, string][];
}

export type FramerEvent =
  | { type: "head"; head: RequestHead }
  | { type: "body"; data: Uint8Array }
  | { type: "end" }
  | { type: "error"; status: 400 | 431 | 501; reason: string };

const CRLF = "\r\n";
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const decoder = new TextDecoder("latin1");

type State =
  | { kind: "head" }
  | { kind: "fixed"; remaining: number }
  | { kind: "chunk-size" }
  | { kind: "chunk-data"; remaining: number }
  | { kind: "chunk-crlf" }
  | { kind: "trailers" }
  | { kind: "failed" };

export class RequestFramer {
  private buf: Uint8Array = new Uint8Array(0);
  private state: State = { kind: "head" };

  constructor(private readonly maxHeadBytes = 65_536) {}

  /** Feeds received bytes; returns what they completed, in order. After an error nothing more is parsed. */
  push(chunk: Uint8Array): FramerEvent[] {
    if (this.state.kind === "failed") return [];
    this.buf = this.buf.length === 0 ? chunk : concat(this.buf, chunk);
    const events: FramerEvent[] = [];
    for (;;) {
      const length = this.buf.length;
      const state: State = this.state;
      const produced = this.step();
      events.push(...produced);
      if (produced.some((e) => e.type === "error")) {
        this.state = { kind: "failed" };
        this.buf = new Uint8Array(0);
        return events;
      }
      if (produced.length === 0 && this.buf.length === length && this.state === state) return events;
    }
  }

  private step(): FramerEvent[] {
    const s = this.state;
    switch (s.kind) {
      case "head":
        return this.head();
      case "fixed":
      case "chunk-data": {
        if (this.buf.length === 0) return [];
        const n = Math.min(s.remaining, this.buf.length);
        const body: FramerEvent = { type: "body", data: this.take(n) };
        const remaining = s.remaining - n;
        if (remaining > 0) {
          this.state = { ...s, remaining };
          return [body];
        }
        if (s.kind === "chunk-data") {
          this.state = { kind: "chunk-crlf" };
          return [body];
        }
        this.state = { kind: "head" };
        return [body, { type: "end" }];
      }
      case "chunk-size": {
        const line = this.line(4096);
        if (line === undefined) return [];
        if (line === null) return [error(400, "chunk size line too long or not ended by CRLF")];
        const m = /^([0-9A-Fa-f]{1,15})(;.*)?$/.exec(line);
        if (!m) return [error(400, `invalid chunk size ${JSON.stringify(line)}`)];
        const size = Number.parseInt(m[1] as string, 16);
        this.state = size === 0 ? { kind: "trailers" } : { kind: "chunk-data", remaining: size };
        return [];
      }
      case "chunk-crlf": {
        if (this.buf.length < 2) return [];
        if (this.buf[0] !== 13 || this.buf[1] !== 10) return [error(400, "chunk data not followed by CRLF")];
        this.take(2);
        this.state = { kind: "chunk-size" };
        return [];
      }
      case "trailers": {
        const line = this.line(this.maxHeadBytes);
        if (line === undefined) return [];
        if (line === null) return [error(431, "trailer section too large or not ended by CRLF")];
        if (line !== "") return []; // trailer fields are consumed, not forwarded
        this.state = { kind: "head" };
        return [{ type: "end" }];
      }
      case "failed":
        return [];
    }
  }

  private head(): FramerEvent[] {
    // Empty lines before a request line are ignored (RFC 9112 section 2.2).
    while (this.buf.length >= 2 && this.buf[0] === 13 && this.buf[1] === 10) this.take(2);
    const end = indexOfHeadEnd(this.buf);
    if (end < 0) {
      if (this.buf.length > this.maxHeadBytes)
        return [error(431, `request head larger than ${this.maxHeadBytes} bytes`)];
      if (hasBareLf(this.buf)) return [error(400, "bare LF line ending")];
      return [];
    }
    if (end > this.maxHeadBytes) return [error(431, `request head larger than ${this.maxHeadBytes} bytes`)];
    const text = decoder.decode(this.take(end + 4)).slice(0, end);
    const [requestLine = "", ...fieldLines] = text.split(CRLF);
    if ([requestLine, ...fieldLines].some((l) => l.includes("\n")))
      return [error(400, "bare LF line ending")];
    const rl = /^([!#$%&'*+\-.^_`|~0-9A-Za-z]+) (\S+) (HTTP\/1\.[01])$/.exec(requestLine);
    if (!rl) return [error(400, `invalid request line ${JSON.stringify(requestLine.slice(0, 100))}`)];
    const headers: [string, string][] = [];
    for (const line of fieldLines) {
      if (line.startsWith(" ") || line.startsWith("\t")) return [error(400, "obsolete line folding")];
      const colon = line.indexOf(":");
      const name = colon > 0 ? line.slice(0, colon) : "";
      if (!TOKEN.test(name)) return [error(400, `invalid header line ${JSON.stringify(line.slice(0, 100))}`)];
      headers.push([name, line.slice(colon + 1).trim()]);
    }
    const framing = bodyFraming(headers);
    if ("error" in framing) return [error(framing.status, framing.error)];
    const head: FramerEvent = {
      type: "head",
      head: {
        method: rl[1] as string,
        target: rl[2] as string,
        version: rl[3] as RequestHead["version"],
        headers,
      },
    };
    if (framing.chunked) this.state = { kind: "chunk-size" };
    else if (framing.length > 0) this.state = { kind: "fixed", remaining: framing.length };
    else return [head, { type: "end" }];
    return [head];
  }

  /** A line ended by CRLF: the text, undefined if incomplete, null if longer than `max` or ended by bare LF. */
  private line(max: number): string | null | undefined {
    const i = indexOfCrlf(this.buf);
    if (i < 0) return this.buf.length > max || this.buf.includes(10) ? null : undefined;
    if (i > max) return null;
    const text = decoder.decode(this.take(i + 2)).slice(0, i);
    return text.includes("\n") ? null : text;
  }

  private take(n: number): Uint8Array {
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }
}

function error(status: 400 | 431 | 501, reason: string): FramerEvent {
  return { type: "error", status, reason };
}

function bodyFraming(
  headers: [string, string][],
): { chunked: boolean; length: number } | { error: string; status: 400 | 501 } {
  const te = headers.filter(([n]) => n.toLowerCase() === "transfer-encoding").map(([, v]) => v);
  const cl = headers.filter(([n]) => n.toLowerCase() === "content-length").map(([, v]) => v);
  if (te.length > 0 && cl.length > 0)
    return { error: "both Transfer-Encoding and Content-Length", status: 400 };
  if (te.length > 0) {
    const codings = te
      .join(",")
      .split(",")
      .map((c) => c.trim().toLowerCase())
      .filter(Boolean);
    if (codings.length !== 1 || codings[0] !== "chunked")
      return {
        error: `unsupported Transfer-Encoding ${JSON.stringify(te.join(", "))} (only chunked)`,
        status: 501,
      };
    return { chunked: true, length: 0 };
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
    return { chunked: false, length: Number(only) };
  }
  return { chunked: false, length: 0 };
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

function indexOfHeadEnd(b: Uint8Array): number {
  for (let i = 0; i + 3 < b.length; i++)
    if (b[i] === 13 && b[i + 1] === 10 && b[i + 2] === 13 && b[i + 3] === 10) return i;
  return -1;
}

function indexOfCrlf(b: Uint8Array): number {
  for (let i = 0; i + 1 < b.length; i++) if (b[i] === 13 && b[i + 1] === 10) return i;
  return -1;
}

function hasBareLf(b: Uint8Array): boolean {
  for (let i = 0; i < b.length; i++) if (b[i] === 10 && (i === 0 || b[i - 1] !== 13)) return true;
  return false;
}
