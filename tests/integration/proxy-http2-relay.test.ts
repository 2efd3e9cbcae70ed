import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import http2 from "node:http2";
import net from "node:net";
import {
  collect,
  ERROR,
  FLAG,
  FRAME,
  FrameReader,
  headerFrames,
  readSettings,
  rstStream,
  SETTING,
  settingsFrame,
} from "../../lib/http2/frames.ts";
import { type HeaderField, HpackEncoder } from "../../lib/http2/hpack.ts";
import { type DevApi, startProdApis, tempDir } from "../support/dev-api.ts";
import { RawCaller } from "../support/h2-raw-caller.ts";
import { startHttp2Pair } from "../support/http2-pair.ts";
import { stopAll } from "../support/proc.ts";
import { waitUntil } from "../support/wait.ts";

/**
 * What the HTTP/2 relay does beyond carrying gRPC (tests/integration/proxy-grpc.test.ts): SETTINGS
 * relayed end to end, request IDs (the caller's kept, else a new one per call, also for heads served from the
 * relay's cache), a target's stream reset passed on, requests refused per stream (malformed, an HPACK
 * bomb, over the stream limit) while the connection goes on, HTTP/1.1 callers of the same listener, and
 * the drain on SIGTERM.
 * A raw caller speaks frames to the plaintext client listener of a client→server pair, both relays.
 */
const dir = tempDir();
let apis: Record<string, DevApi>;
let clientPort: number;
/** What the target saw of the caller's SETTINGS, and how it answers each path. */
let targetSettings: http2.Settings | undefined;
let target: http2.Http2Server;
let resetting: net.Server;
let resettingPort: number;
/** Streams the target holds open (/hold), to be answered when a test says so. */
const held: http2.ServerHttp2Stream[] = [];

beforeAll(async () => {
  apis = await startProdApis(dir, ["web", "api"]);
  target = http2.createServer({ settings: { initialWindowSize: 333_333, maxConcurrentStreams: 50 } });
  target.on("session", (session) => {
    session.on("remoteSettings", (s) => {
      targetSettings = s;
    });
  });
  target.on("stream", (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => {
    stream.on("error", () => {});
    const path = headers[":path"];
    if (path === "/hold") held.push(stream);
    else {
      stream.respond({
        ":status": 200,
        "x-seen-peer": String(headers["svc-peer-id"]),
        "x-seen-id": String(headers["x-request-id"]),
      });
      stream.end("ok");
    }
  });
  await new Promise<void>((r) => target.listen(0, "127.0.0.1", () => r()));
  const pair = await startHttp2Pair(apis, (target.address() as net.AddressInfo).port);
  clientPort = pair.clientPort;
  // A target that answers each request with a head and then resets it: a peer written with frames, since
  // Bun's node:http2 ends a stream it is told to reset (stream.close(code)) as if it were complete.
  resetting = net.createServer((socket) => {
    const reader = new FrameReader(16_384, true);
    const encoder = new HpackEncoder();
    socket.on("error", () => {});
    socket.write(settingsFrame(new Map()));
    socket.on("data", (d: Buffer) => {
      for (const f of reader.push(d)) {
        if (f.type === FRAME.SETTINGS && !(f.flags & FLAG.ACK)) socket.write(settingsFrame(undefined));
        if (f.type !== FRAME.HEADERS) continue;
        const block = encoder.encode([{ name: ":status", value: "200" }]);
        const parts: Uint8Array[] = [];
        headerFrames(f.stream, block, 0, 16_384, collect(parts));
        for (const part of parts) socket.write(part);
        socket.write(rstStream(f.stream, ERROR.INTERNAL_ERROR));
      }
    });
  });
  await new Promise<void>((r) => resetting.listen(0, "127.0.0.1", () => r()));
  resettingPort = (await startHttp2Pair(apis, (resetting.address() as net.AddressInfo).port)).clientPort;
});
afterAll(async () => {
  resetting.close();
  for (const s of held) s.close();
  target.close();
  await stopAll();
});

/** A HEADERS frame's priority (PRIORITY flag) that makes stream 1 depend on itself, weight 16. */
const ON_ITSELF = Buffer.from([0, 0, 0, 1, 16]);

describe("SETTINGS pass end to end", () => {
  test("the caller's initial window reaches the target, the target's window and stream limit the caller", async () => {
    targetSettings = undefined;
    const c = new RawCaller(clientPort, [[SETTING.INITIAL_WINDOW_SIZE, 1_000_000]]);
    await waitUntil(
      "the target's view of the caller's window",
      () => targetSettings?.initialWindowSize === 1_000_000,
      10_000,
    );
    const relayed = await c.frame(
      "the target's SETTINGS",
      (f) =>
        f.type === FRAME.SETTINGS &&
        !(f.flags & FLAG.ACK) &&
        readSettings(f).has(SETTING.INITIAL_WINDOW_SIZE),
    );
    expect(readSettings(relayed).get(SETTING.INITIAL_WINDOW_SIZE)).toBe(333_333);
    const limits = c.frames
      .filter((f) => f.type === FRAME.SETTINGS && !(f.flags & FLAG.ACK))
      .map((f) => readSettings(f).get(SETTING.MAX_CONCURRENT_STREAMS))
      .filter((v) => v !== undefined);
    // Each proxy's own 100 first, then the target's 50.
    expect(limits[0]).toBe(100);
    expect(limits.at(-1)).toBe(50);
    // The caller's SETTINGS are acknowledged (once the target took the window on).
    await c.frame(
      "the ACK of the caller's SETTINGS",
      (f) => f.type === FRAME.SETTINGS && (f.flags & FLAG.ACK) !== 0,
    );
    c.request(1, [{ name: ":path", value: "/" }]);
    expect(await c.status(1)).toBe("200");
    c.close();
  });
});

describe("per stream, the connection going on", () => {
  test("a stream the target resets is reset for the caller with the target's code", async () => {
    const c = new RawCaller(resettingPort);
    c.request(1, [{ name: ":path", value: "/" }]);
    expect(await c.status(1)).toBe("200");
    expect(await c.rst(1)).toBe(ERROR.INTERNAL_ERROR);
    c.request(3, [{ name: ":path", value: "/" }]);
    expect(await c.rst(3)).toBe(ERROR.INTERNAL_ERROR);
    c.close();
  });

  test("a request with a connection-specific field is malformed: RST_STREAM PROTOCOL_ERROR", async () => {
    const c = new RawCaller(clientPort);
    c.request(1, [
      { name: ":path", value: "/" },
      { name: "connection", value: "close" },
    ]);
    expect(await c.rst(1)).toBe(ERROR.PROTOCOL_ERROR);
    c.request(3, [{ name: ":path", value: "/" }]);
    expect(await c.status(3)).toBe("200");
    c.close();
  });

  test("a field value with CR LF (or an ID with one, after calls served from the cache) is malformed", async () => {
    // A value with CR LF would be two fields to an HTTP/1.1 hop behind the target (RFC 9113 8.2.1). The
    // caller sends its IDs as literals not indexed, so that alike heads are served from the cache.
    const c = new RawCaller(clientPort, [], ["x-request-id"]);
    c.request(1, [
      { name: ":path", value: "/" },
      { name: "x-a", value: "1\r\nsvc-peer-id: spiffe://example.org/forged" },
    ]);
    expect(await c.rst(1)).toBe(ERROR.PROTOCOL_ERROR);
    const id = (value: string) => [
      { name: ":path", value: "/" },
      { name: "x-request-id", value },
    ];
    for (const stream of [3, 5, 7]) {
      c.request(stream, id(`id-${stream}`));
      expect(await c.status(stream)).toBe("200");
    }
    c.request(9, id("id\r\nx-b: 1"));
    expect(await c.rst(9)).toBe(ERROR.PROTOCOL_ERROR);
    c.request(11, id("id-11"));
    expect(await c.status(11)).toBe("200");
    expect(c.headers.get(11)?.[0]?.find((f) => f.name === "x-seen-id")?.value).toBe("id-11");
    c.close();
  });

  test("a stream error does not drop the frames read with it: the next stream in the same chunk is served", async () => {
    const c = new RawCaller(clientPort);
    // Stream 1 depends on itself (a stream error); stream 3, in the same write, adds to the caller's
    // HPACK table, which stream 5 then indexes: all of it must be read.
    c.together([
      c.requestFrame(1, [{ name: ":path", value: "/" }], false, FLAG.PRIORITY, ON_ITSELF),
      c.requestFrame(3, [
        { name: ":path", value: "/" },
        { name: "x-new", value: "indexed" },
      ]),
    ]);
    expect(await c.rst(1)).toBe(ERROR.PROTOCOL_ERROR);
    expect(await c.status(3)).toBe("200");
    c.request(5, [
      { name: ":path", value: "/" },
      { name: "x-new", value: "indexed" },
    ]);
    expect(await c.status(5)).toBe("200");
    c.close();
  });

  test("a stream that depends on itself is ended at once: its DATA after it is dropped, not an idle stream's", async () => {
    const c = new RawCaller(clientPort);
    c.together([
      c.requestFrame(1, [{ name: ":path", value: "/" }], true, FLAG.PRIORITY, ON_ITSELF),
      RawCaller.bytes(FRAME.DATA, FLAG.END_STREAM, 1, Buffer.from("late")),
      c.requestFrame(3, [{ name: ":path", value: "/" }]),
    ]);
    expect(await c.rst(1)).toBe(ERROR.PROTOCOL_ERROR);
    expect(await c.status(3)).toBe("200");
    // Read in the same chunk as stream 3's HEADERS: by its answer, stream 1's DATA was dropped.
    expect(c.frames.filter((f) => f.type === FRAME.RST_STREAM && f.stream === 1)).toHaveLength(1);
    expect(c.frames.some((f) => f.type === FRAME.GOAWAY)).toBe(false);
    c.close();
  });

  test("a caller's Svc-Peer-ID never reaches the target", async () => {
    const c = new RawCaller(clientPort);
    c.request(1, [
      { name: ":path", value: "/" },
      { name: "svc-peer-id", value: "spiffe://example.org/forged" },
      { name: "svc_peer_id", value: "spiffe://example.org/forged" },
    ]);
    expect(await c.status(1)).toBe("200");
    expect(c.headers.get(1)?.[0]?.find((f) => f.name === "x-seen-peer")?.value).toBe(
      "spiffe://example.org/ns/prod/sa/web",
    );
    c.close();
  });

  test("request IDs through both hops: the caller's kept wherever it is in the block, else a new one per call", async () => {
    // Alike requests are served from each hop's request head cache after the first ones
    // (proxy/http/h2relay/request-cache.ts); each must still carry its own ID.
    const c = new RawCaller(clientPort);
    let stream = -1;
    /** One request on the next stream: the X-Request-Id the target saw. */
    const seen = async (fields: HeaderField[]): Promise<string> => {
      stream += 2;
      c.request(stream, fields);
      await c.status(stream);
      return c.headers.get(stream)?.[0]?.find((f) => f.name === "x-seen-id")?.value ?? "";
    };
    const path = { name: ":path", value: "/ids" };
    const accept = { name: "accept", value: "*/*" };
    for (let i = 0; i < 4; i++)
      expect(await seen([path, { name: "x-request-id", value: "the-callers" }, accept])).toBe("the-callers");
    for (let i = 0; i < 4; i++)
      expect(await seen([path, accept, { name: "x-request-id", value: `last-${i}` }])).toBe(`last-${i}`);
    const fresh = new Set<string>();
    for (let i = 0; i < 4; i++) fresh.add(await seen([path, accept]));
    expect(fresh.size).toBe(4);
    for (const id of fresh) expect(id).toMatch(/^[0-9a-f-]{36}$/);
    c.close();
  });

  test("an HPACK bomb (one large table entry named 20 times) is refused with 431 while decoding", async () => {
    const c = new RawCaller(clientPort);
    // Stream 1 puts a 4,000-octet value in the table; stream 3 names it 20 times, 80,000 octets decoded
    // from a block of about 20.
    c.request(1, [
      { name: ":path", value: "/" },
      { name: "x-big", value: "b".repeat(4_000) },
    ]);
    expect(await c.status(1)).toBe("200");
    const fields = Array.from({ length: 20 }, () => ({ name: "x-big", value: "b".repeat(4_000) }));
    c.request(3, [{ name: ":path", value: "/" }, ...fields]);
    expect(await c.status(3)).toBe("431");
    c.request(5, [{ name: ":path", value: "/" }]);
    expect(await c.status(5)).toBe("200");
    c.close();
  });

  test("streams beyond the limit of 100 are refused (REFUSED_STREAM), the others served", async () => {
    const c = new RawCaller(clientPort);
    for (let i = 0; i < 101; i++) c.request(2 * i + 1, [{ name: ":path", value: "/hold" }], true);
    expect(await c.rst(201)).toBe(ERROR.REFUSED_STREAM);
    c.close();
    await waitUntil("the held streams to end at the target", () => held.every((s) => s.closed), 10_000);
  });
});

test("an HTTP/1.1 caller of the same listener is served (translated for the HTTP/2 target)", async () => {
  const res = await fetch(`http://127.0.0.1:${clientPort}/`);
  expect(res.status).toBe(200);
  expect(await res.text()).toBe("ok");
  expect(res.headers.get("x-seen-peer")).toBe("spiffe://example.org/ns/prod/sa/web");
});

test("SIGTERM: the caller is told GOAWAY, its open stream still finishes, then the proxy exits", async () => {
  const pair = await startHttp2Pair(apis, (target.address() as net.AddressInfo).port);
  const session = http2.connect(`http://127.0.0.1:${pair.clientPort}`);
  session.on("error", () => {});
  const goaway = new Promise<void>((r) => session.once("goaway", () => r()));
  const before = held.length;
  const req = session.request({ ":path": "/hold" });
  req.end();
  let body = "";
  req.on("data", (d: Buffer) => {
    body += d;
  });
  const done = new Promise<void>((resolve, reject) => {
    req.on("end", () => resolve());
    req.on("error", reject);
  });
  await waitUntil("the stream held at the target", () => held.length > before, 10_000);
  pair.client.proc.kill("SIGTERM");
  await goaway;
  const stream = held[held.length - 1] as http2.ServerHttp2Stream;
  stream.respond({ ":status": 200 });
  stream.end("after the GOAWAY");
  await done;
  expect(body).toBe("after the GOAWAY");
  expect(await pair.client.exited).toBe(0);
  session.close();
});
