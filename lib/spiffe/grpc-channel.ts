/**
 * Just enough gRPC (over HTTP/2 without TLS, as the Workload API is served) for unary and
 * server-streaming calls: length-prefixed messages, metadata headers, grpc-status in trailers (or in
 * a trailers-only response), deadlines and cancellation. One HTTP/2 session per channel, opened on
 * first use and again after it fails, so a call made after the server comes back connects at once.
 */
import * as http2 from "node:http2";
import * as net from "node:net";
import { socketHost } from "../url-host.ts";

const STATUS_NAMES = [
  "OK",
  "CANCELLED",
  "UNKNOWN",
  "INVALID_ARGUMENT",
  "DEADLINE_EXCEEDED",
  "NOT_FOUND",
  "ALREADY_EXISTS",
  "PERMISSION_DENIED",
  "RESOURCE_EXHAUSTED",
  "FAILED_PRECONDITION",
  "ABORTED",
  "OUT_OF_RANGE",
  "UNIMPLEMENTED",
  "INTERNAL",
  "UNAVAILABLE",
  "DATA_LOSS",
  "UNAUTHENTICATED",
] as const;
export type StatusName = (typeof STATUS_NAMES)[number];

export class GrpcError extends Error {
  constructor(
    readonly status: StatusName,
    readonly details: string,
  ) {
    super(`${status}: ${details}`);
  }
}

/** Messages larger than this end the call (grpc-go's default receive limit). */
const MAX_MESSAGE = 4 * 1024 * 1024;

export interface StreamHandlers {
  message(body: Uint8Array): void;
  /** Called once: without an error when the server ended the call with OK. */
  end(error?: GrpcError): void;
}

export interface Call {
  cancel(): void;
}

function frame(body: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + body.length);
  out[0] = 0;
  out.writeUInt32BE(body.length, 1);
  out.set(body, 5);
  return out;
}

function statusOf(headers: http2.IncomingHttpHeaders): GrpcError | "ok" | undefined {
  const raw = headers["grpc-status"];
  if (raw === undefined) return undefined;
  const code = Number(raw);
  if (code === 0) return "ok";
  const name = STATUS_NAMES[code] ?? "UNKNOWN";
  let details = String(headers["grpc-message"] ?? "");
  try {
    details = decodeURIComponent(details);
  } catch {
    // Keep the percent-encoded text: it still names the problem.
  }
  return new GrpcError(name, details || `status ${raw}`);
}

export class GrpcChannel {
  private session: http2.ClientHttp2Session | undefined;

  /** `target` is `unix:///path` (or `unix:/path`), `ip:port` or `[ipv6]:port`; `metadata` goes on every call. */
  constructor(
    readonly target: string,
    private readonly metadata: Readonly<Record<string, string>> = {},
  ) {}

  private connect(): net.Socket {
    if (this.target.startsWith("unix:")) return net.connect(this.target.slice(5).replace(/^\/\/(?=\/)/, ""));
    const at = this.target.lastIndexOf(":");
    const host = socketHost(this.target.slice(0, at));
    return net.connect(Number(this.target.slice(at + 1)), host);
  }

  private open(): http2.ClientHttp2Session {
    const current = this.session;
    if (current && !current.closed && !current.destroyed) return current;
    const session = http2.connect("http://localhost", { createConnection: () => this.connect() });
    // Errors reach each call through its stream; the session is only dropped so the next call reconnects.
    session.on("error", () => {});
    session.on("close", () => {
      if (this.session === session) this.session = undefined;
    });
    this.session = session;
    return session;
  }

  /** Starts a server-streaming (or unary) call. `timeoutMs` sets a deadline. */
  call(path: string, request: Uint8Array, h: StreamHandlers, timeoutMs?: number): Call {
    let done = false;
    let status: GrpcError | "ok" | undefined;
    let pending: Buffer = Buffer.alloc(0);
    let timer: ReturnType<typeof setTimeout> | undefined;
    let stream: http2.ClientHttp2Stream | undefined;
    const finish = (error?: GrpcError) => {
      if (done) return;
      done = true;
      if (timer) clearTimeout(timer);
      if (stream && !stream.closed) stream.close(http2.constants.NGHTTP2_CANCEL);
      h.end(error);
    };
    try {
      stream = this.open().request({
        ":method": "POST",
        ":path": path,
        "content-type": "application/grpc",
        te: "trailers",
        ...(timeoutMs !== undefined ? { "grpc-timeout": `${Math.max(1, Math.ceil(timeoutMs))}m` } : {}),
        ...this.metadata,
      });
    } catch (e) {
      queueMicrotask(() => finish(new GrpcError("UNAVAILABLE", (e as Error).message)));
      return { cancel: () => finish(new GrpcError("CANCELLED", "cancelled by the client")) };
    }
    if (timeoutMs !== undefined) {
      timer = setTimeout(() => finish(new GrpcError("DEADLINE_EXCEEDED", "deadline exceeded")), timeoutMs);
    }
    stream.on("response", (headers) => {
      const code = headers[":status"];
      status = statusOf(headers);
      if (status === undefined && code !== 200) {
        finish(new GrpcError("UNKNOWN", `the server answered HTTP status ${code}, not a gRPC response`));
      }
    });
    stream.on("data", (chunk: Buffer) => {
      if (done) return;
      pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
      while (!done && pending.length >= 5) {
        const length = pending.readUInt32BE(1);
        if (pending[0] !== 0)
          return finish(new GrpcError("INTERNAL", "the server sent a compressed message"));
        if (length > MAX_MESSAGE) {
          return finish(
            new GrpcError("RESOURCE_EXHAUSTED", `a message of ${length} bytes exceeds ${MAX_MESSAGE}`),
          );
        }
        if (pending.length < 5 + length) break;
        const body = pending.subarray(5, 5 + length);
        pending = pending.subarray(5 + length);
        try {
          h.message(body);
        } catch (e) {
          // A handler's fault ends this call, never the process.
          return finish(new GrpcError("INTERNAL", `handling a message failed: ${(e as Error).message}`));
        }
      }
    });
    stream.on("trailers", (trailers) => {
      status = statusOf(trailers) ?? status;
    });
    stream.on("error", (e: Error) => finish(new GrpcError("UNAVAILABLE", e.message)));
    stream.on("close", () => {
      if (status === "ok") {
        if (pending.length > 0) finish(new GrpcError("INTERNAL", "the call ended inside a message"));
        else finish();
      } else finish(status ?? new GrpcError("UNAVAILABLE", "the connection closed without a gRPC status"));
    });
    stream.end(frame(request));
    return { cancel: () => finish(new GrpcError("CANCELLED", "cancelled by the client")) };
  }

  /** A unary call: exactly one response message and status OK. */
  unary(path: string, request: Uint8Array, timeoutMs: number): Promise<Uint8Array> {
    return new Promise((resolve, reject) => {
      let response: Uint8Array | undefined;
      this.call(
        path,
        request,
        {
          message: (b) => {
            response ??= b;
          },
          end: (e) => {
            if (e) reject(e);
            else if (!response) reject(new GrpcError("INTERNAL", "the server sent no response message"));
            else resolve(response);
          },
        },
        timeoutMs,
      );
    });
  }

  close(): void {
    this.session?.close();
    this.session = undefined;
  }
}
