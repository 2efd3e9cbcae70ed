import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import * as http2 from "node:http2";
import { join } from "node:path";
import { GrpcChannel, type GrpcError, type StatusName } from "../../lib/spiffe/grpc-channel.ts";
import { WorkloadApiClient } from "../../lib/spiffe/workload-client.ts";
import { tempDir } from "../support/dev-api.ts";

/**
 * The gRPC client against a hostile Workload API: a real HTTP/2 server on a unix socket that answers
 * each method with a different lie. Every lie ends that call with a named status; none throws.
 */
const dir = tempDir();
const socket = join(dir, "liar.sock");
let server: http2.Http2Server;
let seenHeaders: http2.IncomingHttpHeaders | undefined;

const framed = (body: Uint8Array, flag = 0, length = body.length) => {
  const out = Buffer.alloc(5 + body.length);
  out[0] = flag;
  out.writeUInt32BE(length, 1);
  out.set(body, 5);
  return out;
};

const answers: Record<string, (s: http2.ServerHttp2Stream) => void> = {
  "/t/ok": (s) => {
    s.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
    s.on("wantTrailers", () => s.sendTrailers({ "grpc-status": "0" }));
    // Two messages split across writes at awkward places.
    const both = Buffer.concat([framed(Buffer.from("one")), framed(Buffer.from("two"))]);
    s.write(both.subarray(0, 3));
    s.write(both.subarray(3, 9));
    s.end(both.subarray(9));
  },
  "/t/trailers-only": (s) =>
    s.respond(
      {
        ":status": 200,
        "content-type": "application/grpc",
        "grpc-status": "7",
        "grpc-message": "not%20yours",
      },
      { endStream: true },
    ),
  "/t/http-404": (s) => s.respond({ ":status": 404 }, { endStream: true }),
  "/t/no-status": (s) => {
    s.respond({ ":status": 200, "content-type": "application/grpc" });
    s.end(framed(Buffer.from("x")));
  },
  "/t/compressed": (s) => {
    s.respond({ ":status": 200, "content-type": "application/grpc" });
    s.write(framed(Buffer.from("x"), 1));
  },
  "/t/huge": (s) => {
    s.respond({ ":status": 200, "content-type": "application/grpc" });
    s.write(framed(Buffer.from("x"), 0, 0x7fffffff));
  },
  "/t/truncated": (s) => {
    s.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
    s.on("wantTrailers", () => s.sendTrailers({ "grpc-status": "0" }));
    s.end(framed(Buffer.from("abcdef")).subarray(0, 7));
  },
  "/t/stall": (s) => s.respond({ ":status": 200, "content-type": "application/grpc" }),
  "/t/reset": (s) => s.close(http2.constants.NGHTTP2_INTERNAL_ERROR),
  "/SpiffeWorkloadAPI/FetchJWTBundles": (s) => {
    s.respond({ ":status": 200, "content-type": "application/grpc" });
    // Field 1 (a map entry) announced with 100 bytes that are not there.
    s.write(framed(Uint8Array.from([0x0a, 100, 1])));
  },
};

beforeAll(async () => {
  server = http2.createServer();
  server.on("stream", (s: http2.ServerHttp2Stream, headers) => {
    seenHeaders = headers;
    s.on("error", () => {}); // the reset case errors the server side of its own stream
    const answer = answers[String(headers[":path"])];
    if (answer) answer(s);
    else
      s.respond(
        { ":status": 200, "content-type": "application/grpc", "grpc-status": "12" },
        { endStream: true },
      );
  });
  await new Promise<void>((resolve) => server.listen(socket, resolve));
});
afterAll(() => server.close());

const outcome = (channel: GrpcChannel, path: string, timeoutMs = 5000) =>
  new Promise<{ messages: string[]; error?: GrpcError }>((resolve) => {
    const messages: string[] = [];
    channel.call(
      path,
      new Uint8Array(),
      {
        message: (b) => messages.push(Buffer.from(b).toString()),
        end: (error) => resolve({ messages, error }),
      },
      timeoutMs,
    );
  });

describe("gRPC channel against a server that lies", () => {
  const channel = new GrpcChannel(`unix://${socket}`, { "workload.spiffe.io": "true" });
  afterAll(() => channel.close());

  test("messages split across frames are reassembled; metadata and deadline are sent", async () => {
    expect(await outcome(channel, "/t/ok")).toEqual({ messages: ["one", "two"], error: undefined });
    expect(seenHeaders?.["workload.spiffe.io"]).toBe("true");
    expect(seenHeaders?.["grpc-timeout"]).toBe("5000m");
    expect(seenHeaders?.["content-type"]).toBe("application/grpc");
  });

  const cases: [string, StatusName, RegExp][] = [
    ["/t/trailers-only", "PERMISSION_DENIED", /not yours/],
    ["/t/http-404", "UNKNOWN", /HTTP status 404/],
    ["/t/no-status", "UNAVAILABLE", /without a gRPC status/],
    ["/t/compressed", "INTERNAL", /compressed/],
    ["/t/huge", "RESOURCE_EXHAUSTED", /2147483647 bytes/],
    ["/t/truncated", "INTERNAL", /inside a message/],
    ["/t/reset", "UNAVAILABLE", /./],
    ["/t/unknown", "UNIMPLEMENTED", /status 12/],
  ];
  for (const [path, status, details] of cases) {
    test(`${path} ends the call with ${status}`, async () => {
      const { error } = await outcome(channel, path);
      expect(error?.status).toBe(status);
      expect(error?.details).toMatch(details);
    });
  }

  test("a stalled stream ends at its deadline", async () => {
    const { error } = await outcome(channel, "/t/stall", 200);
    expect(error?.status).toBe("DEADLINE_EXCEEDED");
  });

  test("a handler that throws ends only its call", async () => {
    const error = await new Promise<GrpcError | undefined>((resolve) =>
      channel.call("/t/ok", new Uint8Array(), {
        message: () => {
          throw new Error("boom");
        },
        end: resolve,
      }),
    );
    expect(error?.message).toMatch(/INTERNAL: handling a message failed: boom/);
    expect((await outcome(channel, "/t/ok")).messages).toEqual(["one", "two"]);
  });

  test("a malformed Workload API message is a named error, not an exception", async () => {
    const client = new WorkloadApiClient(`unix://${socket}`);
    await expect(client.fetchJwtBundles(2000)).rejects.toThrow(
      /Workload API FetchJWTBundles at unix:\/\/.*liar\.sock sent a malformed message/,
    );
    client.close();
  });

  test("no server: UNAVAILABLE naming the socket error", async () => {
    const nobody = new GrpcChannel(`unix://${join(dir, "nobody.sock")}`);
    const { error } = await outcome(nobody, "/t/ok");
    expect(error?.status).toBe("UNAVAILABLE");
    expect(error?.details).toMatch(/ENOENT|ECONNREFUSED|no such file/i);
    nobody.close();
  });
});
