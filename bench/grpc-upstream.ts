/**
 * The gRPC target of bench/grpc.ts, in a process of its own: an HTTP/2 (h2c) server that answers every
 * call as a gRPC unary method does on the wire: the request message read whole, one length-prefixed
 * message back (the request's bytes), then the trailers `grpc-status: 0`. A benchmark peer, not a gRPC
 * implementation: no method table, no compression.   bun bench/grpc-upstream.ts PORT
 */
import http2 from "node:http2";

const server = http2.createServer();
server.on("stream", (stream: http2.ServerHttp2Stream) => {
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
server.listen(Number(process.argv[2]), "127.0.0.1");
