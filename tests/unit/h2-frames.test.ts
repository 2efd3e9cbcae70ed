import { describe, expect, test } from "bun:test";
import http2 from "node:http2";
import net from "node:net";
import {
  collect,
  ERROR,
  FLAG,
  FRAME,
  FrameReader,
  frameHeader,
  H2Error,
  HeaderBlocks,
  headerFrames,
  PREFACE,
  readSettings,
  readWindowUpdate,
} from "../../lib/http2/frames.ts";
import { HpackDecoder } from "../../lib/http2/hpack.ts";

/**
 * The HTTP/2 frame reader (lib/http2/frames.ts) against RFC 9113's rules, and against the frames a real
 * client (node:http2) sends.
 */
const frame = (type: number, flags: number, stream: number, payload: number[] | Uint8Array = []) => {
  const p = Uint8Array.from(payload);
  return Uint8Array.from([...frameHeader(p.length, type, flags, stream), ...p]);
};
const codeOf = (f: () => unknown) => {
  try {
    f();
  } catch (e) {
    if (e instanceof H2Error) return { code: e.code, stream: e.stream };
    throw e;
  }
  return undefined;
};
const one = (bytes: Uint8Array) => new FrameReader().push(bytes)[0] as ReturnType<FrameReader["push"]>[0];

describe("FrameReader", () => {
  test("frames split anywhere arrive whole, with the bytes they came in", () => {
    const stream = Uint8Array.from([
      ...frame(FRAME.SETTINGS, 0, 0, [0, 3, 0, 0, 0, 100]),
      ...frame(FRAME.PING, 0, 0, [1, 2, 3, 4, 5, 6, 7, 8]),
      ...frame(
        FRAME.DATA,
        FLAG.END_STREAM,
        5,
        Array.from({ length: 300 }, (_, i) => i % 256),
      ),
    ]);
    const r = new FrameReader();
    const got = [];
    for (let i = 0; i < stream.length; i++) got.push(...r.push(stream.subarray(i, i + 1)));
    expect(got.map((f) => [f.type, f.flags, f.stream, f.payload.length])).toEqual([
      [FRAME.SETTINGS, 0, 0, 6],
      [FRAME.PING, 0, 0, 8],
      [FRAME.DATA, FLAG.END_STREAM, 5, 300],
    ]);
    expect(Buffer.concat(got.map((f) => f.bytes))).toEqual(Buffer.from(stream));
  });
  test("the reserved bit of a stream identifier is ignored", () => {
    const f = frame(FRAME.DATA, 0, 3);
    f[5] = (f[5] as number) | 0x80;
    expect(one(f).stream).toBe(3);
  });
  test("a frame over the announced maximum is a connection error (FRAME_SIZE_ERROR), read from its header", () => {
    const head = frameHeader(16_385, FRAME.DATA, 0, 1);
    expect(codeOf(() => new FrameReader().push(head))).toEqual({ code: ERROR.FRAME_SIZE_ERROR, stream: 0 });
    expect(new FrameReader(20_000).push(head)).toEqual([]);
  });
  test("a server's reader wants the client preface first, in any pieces", () => {
    const r = new FrameReader(undefined, true);
    expect(r.push(PREFACE.subarray(0, 5))).toEqual([]);
    expect(r.push(Uint8Array.from([...PREFACE.subarray(5), ...frame(FRAME.SETTINGS, 0, 0)])).length).toBe(1);
    expect(codeOf(() => new FrameReader(undefined, true).push(Buffer.from("GET / HTTP/1.1\r\n")))).toEqual({
      code: ERROR.PROTOCOL_ERROR,
      stream: 0,
    });
  });
});

describe("frame payloads", () => {
  test("SETTINGS: values checked as section 6.5.2 says; unknown ones ignored", () => {
    const settings =
      (payload: number[], flags = 0, stream = 0) =>
      () =>
        readSettings(one(frame(FRAME.SETTINGS, flags, stream, payload)));
    expect(settings([0, 3, 0, 0, 0, 100, 0, 99, 0, 0, 0, 1])()).toEqual(
      new Map([
        [3, 100],
        [99, 1],
      ]),
    );
    expect(codeOf(settings([0, 2, 0, 0, 0, 2]))).toEqual({ code: ERROR.PROTOCOL_ERROR, stream: 0 });
    expect(codeOf(settings([0, 4, 0x80, 0, 0, 0]))).toEqual({ code: ERROR.FLOW_CONTROL_ERROR, stream: 0 });
    expect(codeOf(settings([0, 5, 0, 0, 0x3f, 0xff]))).toEqual({ code: ERROR.PROTOCOL_ERROR, stream: 0 });
    expect(codeOf(settings([0, 5, 1, 0, 0, 0]))).toEqual({ code: ERROR.PROTOCOL_ERROR, stream: 0 });
    expect(codeOf(settings([0, 3, 0, 0, 0]))).toEqual({ code: ERROR.FRAME_SIZE_ERROR, stream: 0 });
    expect(codeOf(settings([0, 0, 0, 0, 0, 0], FLAG.ACK))).toEqual({
      code: ERROR.FRAME_SIZE_ERROR,
      stream: 0,
    });
    expect(codeOf(settings([], 0, 1))).toEqual({ code: ERROR.PROTOCOL_ERROR, stream: 0 });
  });
  test("WINDOW_UPDATE: an increment of 0 is an error of its stream, or of the connection on stream 0", () => {
    expect(readWindowUpdate(one(frame(FRAME.WINDOW_UPDATE, 0, 1, [0x80, 0, 1, 0])))).toBe(256);
    expect(codeOf(() => readWindowUpdate(one(frame(FRAME.WINDOW_UPDATE, 0, 7, [0, 0, 0, 0]))))).toEqual({
      code: ERROR.PROTOCOL_ERROR,
      stream: 7,
    });
    expect(codeOf(() => readWindowUpdate(one(frame(FRAME.WINDOW_UPDATE, 0, 0, [0, 0, 0, 0]))))).toEqual({
      code: ERROR.PROTOCOL_ERROR,
      stream: 0,
    });
    expect(codeOf(() => readWindowUpdate(one(frame(FRAME.WINDOW_UPDATE, 0, 1, [0, 0, 1]))))?.code).toBe(
      ERROR.FRAME_SIZE_ERROR,
    );
  });
  test("HEADERS: padding and priority are taken off; padding as long as the payload is refused", () => {
    // The block of one HEADERS frame, as HeaderBlocks reads it.
    const headersFragment = (f: ReturnType<typeof one>) =>
      new HeaderBlocks(1024).take(f)?.block ?? new Uint8Array(0);
    const padded = frame(
      FRAME.HEADERS,
      FLAG.PADDED | FLAG.PRIORITY | FLAG.END_HEADERS,
      1,
      [2, 0, 0, 0, 3, 16, 0x82, 0x84, 0, 0],
    );
    expect(Array.from(headersFragment(one(padded)))).toEqual([0x82, 0x84]);
    expect(
      codeOf(() => headersFragment(one(frame(FRAME.HEADERS, FLAG.PADDED, 1, [4, 0x82, 0, 0]))))?.code,
    ).toBe(ERROR.PROTOCOL_ERROR);
    expect(codeOf(() => headersFragment(one(frame(FRAME.HEADERS, 0, 0, [0x82]))))?.code).toBe(
      ERROR.PROTOCOL_ERROR,
    );
  });
});

describe("header blocks", () => {
  test("HEADERS then CONTINUATION frames are one block; split again for a peer's frame size", () => {
    const block = Uint8Array.from({ length: 40_000 }, (_, i) => i % 251);
    const frames: Uint8Array[] = [];
    headerFrames(3, block, FLAG.END_STREAM, 16_384, collect(frames));
    const reader = new FrameReader();
    const read = reader.push(Buffer.concat(frames));
    expect(read.map((f) => [f.type, f.flags])).toEqual([
      [FRAME.HEADERS, FLAG.END_STREAM],
      [FRAME.CONTINUATION, 0],
      [FRAME.CONTINUATION, FLAG.END_HEADERS],
    ]);
    const blocks = new HeaderBlocks(64 * 1024);
    const done = read.map((f) => blocks.take(f));
    expect(done.slice(0, 2)).toEqual([undefined, undefined]);
    expect(done[2]?.block).toEqual(block);
    expect(done[2]?.headers.stream).toBe(3);
  });
  test("a block and its tail are one block: in one frame when they fit, else split as one", () => {
    const read = (block: Uint8Array, tail: Uint8Array) => {
      const pieces: Uint8Array[] = [];
      headerFrames(5, block, 0, 16_384, collect(pieces), tail);
      const blocks = new HeaderBlocks(64 * 1024);
      const frames = new FrameReader().push(Buffer.concat(pieces));
      return { frames: frames.map((f) => f.type), block: frames.map((f) => blocks.take(f)).at(-1)?.block };
    };
    const tail = Uint8Array.from([0x0f, 0x2b, 0x03, 0x61, 0x62, 0x63]);
    expect(read(Uint8Array.from([0x82, 0x87]), tail)).toEqual({
      frames: [FRAME.HEADERS],
      block: Uint8Array.from([0x82, 0x87, ...tail]),
    });
    const large = Uint8Array.from({ length: 16_380 }, (_, i) => i % 251);
    expect(read(large, tail)).toEqual({
      frames: [FRAME.HEADERS, FRAME.CONTINUATION],
      block: Uint8Array.from([...large, ...tail]),
    });
  });
  test("any frame between HEADERS and END_HEADERS, or a CONTINUATION of another stream, is refused", () => {
    const blocks = new HeaderBlocks(1024);
    blocks.take(one(frame(FRAME.HEADERS, 0, 1, [0x82])));
    expect(codeOf(() => blocks.take(one(frame(FRAME.PING, 0, 0, [0, 0, 0, 0, 0, 0, 0, 0])))))?.toEqual({
      code: ERROR.PROTOCOL_ERROR,
      stream: 0,
    });
    const other = new HeaderBlocks(1024);
    other.take(one(frame(FRAME.HEADERS, 0, 1, [0x82])));
    expect(codeOf(() => other.take(one(frame(FRAME.CONTINUATION, FLAG.END_HEADERS, 3, [0x84]))))?.code).toBe(
      ERROR.PROTOCOL_ERROR,
    );
    expect(
      codeOf(() => new HeaderBlocks(1024).take(one(frame(FRAME.CONTINUATION, FLAG.END_HEADERS, 1)))),
    )?.toEqual({
      code: ERROR.PROTOCOL_ERROR,
      stream: 0,
    });
  });
  test("a block over its bound is refused as soon as it passes it (a CONTINUATION flood)", () => {
    const blocks = new HeaderBlocks(4096);
    blocks.take(one(frame(FRAME.HEADERS, 0, 1, Array(1000).fill(0))));
    for (let i = 0; i < 3; i++) blocks.take(one(frame(FRAME.CONTINUATION, 0, 1, Array(1000).fill(0))));
    expect(codeOf(() => blocks.take(one(frame(FRAME.CONTINUATION, 0, 1, Array(1000).fill(0))))))?.toEqual({
      code: ERROR.ENHANCE_YOUR_CALM,
      stream: 0,
    });
  });
});

test("a real client's first frames (node:http2): preface, SETTINGS, and a HEADERS block our HPACK decodes", async () => {
  const received: Uint8Array[] = [];
  let gotAll: () => void = () => {};
  const all = new Promise<void>((r) => {
    gotAll = r;
  });
  const reader = new FrameReader(undefined, true);
  const blocks = new HeaderBlocks(64 * 1024);
  const hpack = new HpackDecoder();
  const fields: { name: string; value: string }[] = [];
  const server = net.createServer((socket) => {
    socket.on("data", (chunk: Buffer) => {
      received.push(chunk);
      for (const f of reader.push(chunk)) {
        if (f.type === FRAME.SETTINGS) readSettings(f);
        const done = blocks.take(f);
        if (done) {
          fields.push(...hpack.decode(done.block));
          gotAll();
        }
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const session = http2.connect(`http://127.0.0.1:${(server.address() as net.AddressInfo).port}`);
  session.on("error", () => {});
  const req = session.request({
    ":path": "/svc.Echo/Say",
    "content-type": "application/grpc",
    te: "trailers",
  });
  req.on("error", () => {});
  await all;
  expect(fields).toEqual(
    expect.arrayContaining([
      { name: ":path", value: "/svc.Echo/Say" },
      { name: ":method", value: "GET" },
      { name: "content-type", value: "application/grpc" },
      { name: "te", value: "trailers" },
    ]),
  );
  session.destroy();
  server.close();
});
