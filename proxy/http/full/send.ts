import type { ServerResponse } from "node:http";
import { pipeline, type Readable } from "node:stream";
import { isBuffered, type ProxyResponse } from "../types.ts";

/**
 * Writes a response. A streamed body that fails half way (the target reset, its certificate expired) ends
 * the caller's connection (HTTP/1.1) or stream (HTTP/2) at once: the caller sees the response cut short
 * instead of waiting for bytes that will never come.
 */
export function send(
  res: ServerResponse,
  r: ProxyResponse,
  counter?: { n: number },
  onBroken?: (e: Error) => void,
): void {
  res.writeHead(r.status, r.headers);
  // Trailers reach an HTTP/2 caller (gRPC's status); HTTP/1.1 callers are not sent any.
  if (res.req.httpVersionMajor === 2) r.trailers?.((t) => res.addTrailers(t));
  if (isBuffered(r.body)) {
    if (counter) counter.n += typeof r.body === "string" ? Buffer.byteLength(r.body) : r.body.length;
    res.end(r.body);
  } else {
    if (counter) {
      r.body.on("data", (chunk: Buffer) => {
        counter.n += chunk.length;
      });
    }
    pipeline(r.body as Readable, res, (e) => {
      if (!e) return;
      res.destroy();
      onBroken?.(e);
    });
  }
}
