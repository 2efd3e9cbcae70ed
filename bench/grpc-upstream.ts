/**
 * The gRPC target of bench/grpc.ts, in a process of its own: an HTTP/2 (h2c) server that answers every
 * call as a gRPC unary method does on the wire: the request message read whole, one length-prefixed
 * message back (the request's bytes), then the trailers `grpc-status: 0`; and `/bench.Echo/Stream` as a
 * server-streaming method does: STREAM_MESSAGES messages of 64 KiB, written as the caller takes them. A
 * benchmark peer, not a gRPC implementation: no method table, no compression.
 *
 *   bun bench/grpc-upstream.ts PORT
 */
import http2 from "node:http2";

/** One server-streaming call: this many 64 KiB messages. */
export const STREAM_MESSAGES = 16;
const MESSAGE = (() => {
  const body = Buffer.alloc(64 * 1024, 120);
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(body.length, 1);
  return Buffer.concat([prefix, body]);
})();

async function serverStream(stream: http2.ServerHttp2Stream): Promise<void> {
  // A stream the client reset (h2load stopping) has nothing to answer.
  if (stream.destroyed || stream.closed) return;
  stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
  stream.once("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
  for (let i = 0; i < STREAM_MESSAGES && !stream.destroyed; i++)
    if (!stream.write(MESSAGE)) await new Promise((r) => stream.once("drain", r));
  stream.end();
}

const server = http2.createServer();
server.on("stream", (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => {
  if (headers[":path"] === "/bench.Echo/Stream") {
    stream.on("error", () => {});
    stream.resume();
    stream.on("end", () => void serverStream(stream).catch(() => stream.destroy()));
    return;
  }
  const chunks: Buffer[] = [];
  stream.on("data", (c: Buffer) => chunks.push(c));
  stream.on("end", () => {
    // A stream the client reset (h2load stopping) has nothing to answer.
    if (stream.destroyed || stream.closed) return;
    stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
    stream.once("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
    stream.end(Buffer.concat(chunks));
  });
  stream.on("error", () => {});
});
if (import.meta.main) server.listen(Number(process.argv[2]), "127.0.0.1");
