import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import net from "node:net";
import {
  collect,
  ERROR,
  FLAG,
  FRAME,
  FrameReader,
  frame,
  headerFrames,
  rstStream,
  settingsFrame,
} from "../../lib/http2/frames.ts";
import { type HeaderField, HpackDecoder, HpackEncoder } from "../../lib/http2/hpack.ts";
import { startProdApis, tempDir } from "../support/dev-api.ts";
import { RawCaller } from "../support/h2-raw-caller.ts";
import { freePort } from "../support/net.ts";
import { type Proc, stopAll } from "../support/proc.ts";
import { logLines, startSvcProxy } from "../support/proxy.ts";
import { waitUntil } from "../support/wait.ts";

/**
 * The HTTP/2 relay against callers that lie about their requests and targets that answer in odd ways,
 * found by an adversarial trial: DATA that does not match the request's content-length, request targets
 * RFC 9113 does not allow, a response cut by a timeout once it had begun, a target made to reset streams
 * (MadeYouReset), frames on streams the caller could never have opened, and a header block left open.
 * The target is written with frames, so that it can answer as no library would, and records what reached
 * it: the proof that a refused request never did.
 */
const dir = tempDir();
let proxy: Proc;
/** A listener with the default timeouts, and one with read and write at 1 s. */
let port: number;
let quickPort: number;
let target: net.Server;

/** What the target saw of each request, by :path. */
interface Seen {
  fields: HeaderField[];
  data: number;
  ended: boolean;
  reset?: number;
}
const seen = new Map<string, Seen>();
/** Streams the target was sent a frame on without ever being sent their head (idle there). */
const idleAtTarget: number[] = [];

const OK = [{ name: ":status", value: "200" }];

/**
 * The target, by :path: `/early` answers in full before the request has ended; `/begin` sends its head and
 * part of its body, then nothing; `/reset` resets each stream at once (FLOW_CONTROL_ERROR), `/reset-twice`
 * twice; anything else answers "ok" once the request has ended.
 */
function startTarget(): Promise<number> {
  target = net.createServer((socket) => {
    socket.on("error", () => {});
    const reader = new FrameReader(16_384, true);
    const decoder = new HpackDecoder();
    const encoder = new HpackEncoder();
    const byStream = new Map<number, { path: string; seen: Seen }>();
    const send = (...frames: Uint8Array[]) => socket.write(Buffer.concat(frames));
    const answer = (stream: number, body: string, end: boolean) => {
      const parts: Uint8Array[] = [];
      headerFrames(stream, encoder.encode(OK), 0, 16_384, collect(parts));
      send(...parts, frame(FRAME.DATA, end ? FLAG.END_STREAM : 0, stream, Buffer.from(body)));
    };
    send(settingsFrame(new Map()));
    socket.on("data", (chunk: Buffer) => {
      for (const f of reader.push(chunk)) {
        const s = byStream.get(f.stream);
        const ends = (f.flags & FLAG.END_STREAM) !== 0;
        if (f.type === FRAME.SETTINGS && !(f.flags & FLAG.ACK)) send(settingsFrame(undefined));
        else if (f.type === FRAME.HEADERS && s) {
          decoder.decode(f.payload); // trailers: read, so that the table stays in step
          if (ends) s.seen.ended = true;
        } else if (f.type === FRAME.HEADERS) {
          const fields = decoder.decode(f.payload);
          const path = fields.find((x) => x.name === ":path")?.value ?? "";
          const record: Seen = { fields, data: 0, ended: ends };
          seen.set(path, record);
          byStream.set(f.stream, { path, seen: record });
          if (path.startsWith("/early")) answer(f.stream, "early", true);
          else if (path.startsWith("/begin")) answer(f.stream, "partial", false);
          else if (path.startsWith("/reset")) {
            send(rstStream(f.stream, ERROR.FLOW_CONTROL_ERROR));
            if (path.startsWith("/reset-twice")) send(rstStream(f.stream, ERROR.FLOW_CONTROL_ERROR));
          } else if (ends) answer(f.stream, "ok", true);
        } else if (f.type === FRAME.DATA && s) {
          s.seen.data += f.length;
          if (ends) {
            s.seen.ended = true;
            if (!/^\/(early|begin|reset)/.test(s.path)) answer(f.stream, "ok", true);
          }
        } else if ((f.type === FRAME.RST_STREAM || f.type === FRAME.WINDOW_UPDATE) && f.stream !== 0 && !s)
          idleAtTarget.push(f.stream);
        else if (f.type === FRAME.RST_STREAM && s) s.seen.reset = Buffer.from(f.payload).readUInt32BE(0);
      }
    });
  });
  return new Promise((r) =>
    target.listen(0, "127.0.0.1", () => r((target.address() as net.AddressInfo).port)),
  );
}

let metricsPort: number;

beforeAll(async () => {
  const apis = await startProdApis(dir, ["web"]);
  const targetPort = await startTarget();
  [port, quickPort, metricsPort] = [await freePort(), await freePort(), await freePort()];
  const listener = (name: string, at: number, more: object = {}) => ({
    name,
    address: `127.0.0.1:${at}`,
    mode: "client",
    connection: { http2: true },
    target: { url: `http://127.0.0.1:${targetPort}` },
    ...more,
  });
  proxy = await startSvcProxy({
    spiffe: { workload_socket_path: apis.web?.socket },
    metricsAddr: `127.0.0.1:${metricsPort}`,
    listeners: [
      listener("relay", port),
      listener("quick", quickPort, { timeouts: { read: "1s", write: "1s" } }),
    ],
  });
});
afterAll(async () => {
  target.close();
  await stopAll();
});

/** A request's head from `c` on `stream`: POST to `path`, with `fields` after the pseudo-header fields. */
const post = (c: RawCaller, stream: number, path: string, fields: HeaderField[], end: boolean) =>
  c.requestFrame(stream, [{ name: ":path", value: path }, ...fields], !end);

const data = (stream: number, body: string, end: boolean) =>
  RawCaller.bytes(FRAME.DATA, end ? FLAG.END_STREAM : 0, stream, Buffer.from(body));

/** The count of requests answered `code` on `listener`, from /metrics. */
async function requests(listener: string, code: number): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const re = new RegExp(
    `^svc_proxy_http_requests_total\\{listener="${listener}",code="${code}"\\} (\\d+)$`,
    "m",
  );
  return Number(re.exec(text)?.[1] ?? 0);
}

describe("a request's body is held to its content-length (RFC 9113 section 8.1.1)", () => {
  test("more DATA than the content-length: reset, and the target never gets the excess", async () => {
    const c = new RawCaller(port);
    const smuggled = "GET /admin HTTP/1.1\r\nHost: x\r\n\r\n";
    c.together([
      post(c, 1, "/cl-over", [{ name: "content-length", value: "0" }], false),
      data(1, smuggled, true),
    ]);
    expect(await c.rst(1)).toBe(ERROR.PROTOCOL_ERROR);
    await waitUntil(
      "the target's reset of the stream",
      () => seen.get("/cl-over")?.reset !== undefined,
      10_000,
    );
    expect(seen.get("/cl-over")).toMatchObject({ data: 0, ended: false, reset: ERROR.CANCEL });
    // The connection goes on, its window whole: the next request is served.
    c.together([post(c, 3, "/after", [{ name: "content-length", value: "2" }], false), data(3, "hi", true)]);
    expect(await c.status(3)).toBe("200");
    expect(seen.get("/after")).toMatchObject({ data: 2, ended: true });
    c.close();
  });

  test("less DATA than the content-length, ended by DATA, by trailers or by the head itself: reset", async () => {
    const c = new RawCaller(port);
    c.together([
      post(c, 1, "/cl-short", [{ name: "content-length", value: "100" }], false),
      data(1, "12345", true),
    ]);
    expect(await c.rst(1)).toBe(ERROR.PROTOCOL_ERROR);
    await waitUntil("the target's reset", () => seen.get("/cl-short")?.reset !== undefined, 10_000);
    // The DATA that would end the request short is not passed on either.
    expect(seen.get("/cl-short")).toMatchObject({ data: 0, ended: false, reset: ERROR.CANCEL });
    c.together([
      post(c, 3, "/cl-trailers", [{ name: "content-length", value: "10" }], false),
      data(3, "12345", false),
      RawCaller.bytes(
        FRAME.HEADERS,
        FLAG.END_HEADERS | FLAG.END_STREAM,
        3,
        c.encoder.encode([{ name: "x-checksum", value: "1" }]),
      ),
    ]);
    expect(await c.rst(3)).toBe(ERROR.PROTOCOL_ERROR);
    await waitUntil("the target's reset", () => seen.get("/cl-trailers")?.reset !== undefined, 10_000);
    expect(seen.get("/cl-trailers")?.ended).toBe(false);
    c.together([post(c, 5, "/cl-head-only", [{ name: "content-length", value: "3" }], true)]);
    expect(await c.rst(5)).toBe(ERROR.PROTOCOL_ERROR);
    c.together([
      post(c, 7, "/cl-exact", [{ name: "content-length", value: "5" }], false),
      data(7, "12345", true),
    ]);
    expect(await c.status(7)).toBe("200");
    expect(seen.has("/cl-head-only")).toBe(false);
    c.close();
  });
});

test("a caller's reset or window update of a stream the proxy refused does not reach the target, where it would be idle", async () => {
  const c = new RawCaller(port);
  // Stream 1 held open at the target; stream 3 refused by the proxy (a head that ends the request short
  // of its content-length), then cancelled by its caller at once, as a client may do.
  c.together([post(c, 1, "/begin-held", [], true)]);
  expect(await c.status(1)).toBe("200");
  c.together([
    post(c, 3, "/refused-then-reset", [{ name: "content-length", value: "3" }], true),
    RawCaller.bytes(FRAME.WINDOW_UPDATE, 0, 3, Buffer.from([0, 0, 1, 0])),
    RawCaller.bytes(FRAME.RST_STREAM, 0, 3, Buffer.from([0, 0, 0, ERROR.CANCEL])),
    post(c, 5, "/after-refused", [], true),
  ]);
  expect(await c.rst(3)).toBe(ERROR.PROTOCOL_ERROR);
  expect(await c.status(5)).toBe("200");
  expect(idleAtTarget).not.toContain(3);
  expect(c.frames.some((f) => f.type === FRAME.GOAWAY)).toBe(false);
  c.close();
});

test("request targets RFC 9113 does not allow never reach the target", async () => {
  const c = new RawCaller(port);
  const refused: [string, HeaderField[]][] = [
    ["no-slash", []],
    ["/userinfo", [{ name: ":authority", value: "user:pw@x" }]],
    ["/host", [{ name: "host", value: "elsewhere" }]],
    ["/a b", []],
  ];
  let stream = 1;
  for (const [path, fields] of refused) {
    // RawCaller's head has :authority x first; a second :authority is itself malformed, so the userinfo
    // case is sent with its own head.
    const head =
      path === "/userinfo"
        ? RawCaller.bytes(
            FRAME.HEADERS,
            FLAG.END_HEADERS | FLAG.END_STREAM,
            stream,
            c.encoder.encode([
              { name: ":method", value: "GET" },
              { name: ":scheme", value: "http" },
              { name: ":path", value: path },
              ...fields,
            ]),
          )
        : post(c, stream, path, fields, true);
    c.together([head]);
    expect(await c.rst(stream)).toBe(ERROR.PROTOCOL_ERROR);
    expect(seen.has(path)).toBe(false);
    stream += 2;
  }
  c.together([post(c, stream, "/fine?q=1", [{ name: "host", value: "X" }], true)]);
  expect(await c.status(stream)).toBe("200");
  c.close();
});

describe("timeouts once the response has begun: a reset, never a second head", () => {
  test("write runs out mid-response: RST_STREAM CANCEL, counted under the status sent", async () => {
    const before = await requests("quick", 200);
    const c = new RawCaller(quickPort);
    c.together([post(c, 1, "/begin", [], true)]);
    expect(await c.status(1)).toBe("200");
    expect(await c.rst(1)).toBe(ERROR.CANCEL);
    expect(c.headers.get(1)).toHaveLength(1);
    await waitUntil("the target's reset", () => seen.get("/begin")?.reset === ERROR.CANCEL, 10_000);
    await waitUntil(
      "the stream counted as 200",
      async () => (await requests("quick", 200)) === before + 1,
      10_000,
    );
    c.close();
  });

  test("read runs out after the target answered in full: RST_STREAM NO_ERROR, counted as 200", async () => {
    const before = await requests("quick", 200);
    const before408 = await requests("quick", 408);
    const c = new RawCaller(quickPort);
    c.together([post(c, 1, "/early", [], false)]);
    expect(await c.status(1)).toBe("200");
    expect(await c.rst(1)).toBe(ERROR.NO_ERROR);
    expect(c.headers.get(1)).toHaveLength(1);
    await waitUntil(
      "the stream counted as 200",
      async () => (await requests("quick", 200)) === before + 1,
      10_000,
    );
    expect(await requests("quick", 408)).toBe(before408);
    c.close();
  });
});

test("a header block left open is ended by read, not idle: GOAWAY PROTOCOL_ERROR", async () => {
  const c = new RawCaller(quickPort);
  const block = c.encoder.encode([
    { name: ":method", value: "GET" },
    { name: ":scheme", value: "http" },
    { name: ":path", value: "/open-block" },
  ]);
  c.together([RawCaller.bytes(FRAME.HEADERS, FLAG.END_STREAM, 1, block)]);
  const away = await c.frame("GOAWAY", (f) => f.type === FRAME.GOAWAY);
  expect(Buffer.from(away.payload).readUInt32BE(4)).toBe(ERROR.PROTOCOL_ERROR);
  await waitUntil("the connection closed", () => c.closed, 10_000);
  expect(seen.has("/open-block")).toBe(false);
});

test("streams the target resets before answering count against the reset budget (MadeYouReset)", async () => {
  const c = new RawCaller(port);
  // Each stream is opened and left open; the target resets it. Without the budget each reset frees a
  // place for a new stream while the target may still be working on the last. Batches of 90 (the limit
  // is 100 open streams), each once the last one's resets have come back: 1,440 in all at most.
  const goneAway = () => c.frames.some((f) => f.type === FRAME.GOAWAY);
  let next = 1;
  for (let batch = 0; batch < 16 && !goneAway(); batch++) {
    const first = next;
    const frames: Buffer[] = [];
    for (let i = 0; i < 90; i++, next += 2) frames.push(post(c, next, `/reset-${next}`, [], false));
    c.together(frames);
    const last = next - 2;
    await waitUntil(
      `the resets of streams ${first} to ${last}`,
      () => goneAway() || c.frames.some((f) => f.type === FRAME.RST_STREAM && f.stream === last),
      10_000,
    );
  }
  const away = await c.frame("GOAWAY", (f) => f.type === FRAME.GOAWAY);
  expect(Buffer.from(away.payload).readUInt32BE(4)).toBe(ERROR.ENHANCE_YOUR_CALM);
  await waitUntil(
    "the log line",
    () =>
      logLines(proxy).some((l) => l.msg === "caller HTTP/2 connection ended" && l.reason === "rapid_reset"),
    10_000,
  );
  c.close();
  // A target's repeated reset of one stream reaches the caller once.
  const d = new RawCaller(port);
  d.together([post(d, 1, "/reset-twice", [], false), post(d, 3, "/after-resets", [], true)]);
  expect(await d.status(3)).toBe("200");
  expect(d.frames.filter((f) => f.type === FRAME.RST_STREAM && f.stream === 1)).toHaveLength(1);
  d.close();
});

test("a WINDOW_UPDATE or RST_STREAM on an even stream (never a caller's) ends the connection, with one GOAWAY", async () => {
  for (const [type, payload] of [
    [FRAME.WINDOW_UPDATE, Buffer.from([0, 0, 0, 1])],
    [FRAME.RST_STREAM, Buffer.from([0, 0, 0, 8])],
  ] as const) {
    const c = new RawCaller(port);
    c.together([post(c, 1, "/", [], true), post(c, 3, "/", [], true)]);
    expect(await c.status(3)).toBe("200");
    c.together([RawCaller.bytes(type, 0, 2, payload)]);
    const away = await c.frame("GOAWAY", (f) => f.type === FRAME.GOAWAY);
    expect(Buffer.from(away.payload).readUInt32BE(4)).toBe(ERROR.PROTOCOL_ERROR);
    await waitUntil("the connection closed", () => c.closed, 10_000);
    expect(c.frames.filter((f) => f.type === FRAME.GOAWAY)).toHaveLength(1);
  }
});
