import type { IncomingHttpHeaders, OutgoingHttpHeaders } from "node:http";
import type { Readable } from "node:stream";
import type { SpiffeId } from "../../lib/spiffe/id.ts";
import type { Logger } from "../log.ts";

/** A request on its way through a listener's middleware chain to the target. Bodies stream. */
export interface ProxyRequest {
  id: string;
  listener: string;
  method: string;
  /** Path and query, as received. */
  path: string;
  /**
   * The fields as the caller sent them, a caller's Svc-Peer-ID included: what goes to the target is
   * headers.ts requestFields (the header policy, the proxy's own fields), and a middleware that wants the
   * caller's identity reads `peer`, never this.
   */
  headers: IncomingHttpHeaders;
  body: Readable;
  /** The authenticated caller (server and central modes). */
  peer: SpiffeId | undefined;
  /** The caller's connection (its socket, or its HTTP/2 session): emits "close" when it ends. */
  connection: object;
  remoteAddress: string;
  log: Logger;
  /** Aborted when the caller goes away or the write timeout fires; upstream requests follow it. */
  signal: AbortSignal;
}

export interface ProxyResponse {
  status: number;
  headers: OutgoingHttpHeaders;
  /** Streamed, or whole when a middleware buffered it. */
  body: Readable | string | Uint8Array;
  /** Set on responses the proxy made because the target could not be used. */
  failure?: "target-refused" | "target-unreachable" | "target-failed";
  /** For target-refused: the error code (a peer refusal, lib/errors.ts isPeerRefusal, or the notary's). */
  failureCode?: string;
  /** The authenticated upstream workload, when the target was reached over SPIFFE mTLS. */
  upstream?: Upstream;
  /**
   * An open-ended stream (server-sent events) that bounds its own pauses: the write timeout, which bounds
   * an answer from the end of its request, stops once its head is sent.
   */
  open?: true;
  /** For a streamed body: registers who receives the target's trailers, if it sends any (HTTP/2). */
  trailers?: (listener: (trailers: OutgoingHttpHeaders) => void) => void;
}

/** An upstream authenticated over SPIFFE mTLS: its SPIFFE ID and the chain it presented, leaf first. */
export interface Upstream {
  id: SpiffeId;
  chain: readonly Uint8Array[];
}

/**
 * Ends a streamed answer for its caller's sake (it read nothing for timeouts.idle): the listener then does
 * not log the cut as the target's failure. Whoever ends the answer logs why.
 */
export class CallerStalled extends Error {}

export type Handler = (req: ProxyRequest) => Promise<ProxyResponse>;
/** `next` passes the request on; the first middleware in the configuration sees the request first. */
export type Middleware = (req: ProxyRequest, next: Handler) => Promise<ProxyResponse>;

export function isBuffered(body: ProxyResponse["body"]): body is string | Uint8Array {
  return typeof body === "string" || body instanceof Uint8Array;
}

/** A short plain-text response from the proxy itself (errors, refusals). */
export function proxyResponse(
  status: number,
  message: string,
  failure?: ProxyResponse["failure"],
): ProxyResponse {
  return {
    status,
    headers: { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store" },
    body: `svc-proxy: ${message}\n`,
    ...(failure ? { failure } : {}),
  };
}

const REASONS: Record<number, string> = {
  400: "Bad Request",
  408: "Request Timeout",
  431: "Request Header Fields Too Large",
  501: "Not Implemented",
  502: "Bad Gateway",
  504: "Gateway Timeout",
};

/**
 * proxyResponse as bytes on the wire, for a connection no HTTP server writes to (the relay; the full
 * path's timed-out head).
 */
export function proxyAnswer(status: number, message: string, close: boolean): Uint8Array {
  const body = Buffer.from(`svc-proxy: ${message}\n`, "utf8");
  const head = `HTTP/1.1 ${status} ${REASONS[status] ?? "Error"}\r\ncontent-type: text/plain; charset=utf-8\r\ncache-control: no-store\r\ncontent-length: ${body.length}\r\n${close ? "connection: close\r\n" : ""}\r\n`;
  return Buffer.concat([Buffer.from(head, "latin1"), body]);
}
