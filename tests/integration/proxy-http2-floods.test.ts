import { afterAll, beforeAll, expect, test } from "bun:test";
import http2 from "node:http2";
import net from "node:net";
import { startProdApis, tempDir } from "../support/dev-api.ts";
import { startHttp2Pair } from "../support/http2-pair.ts";
import { type Proc, stopAll } from "../support/proc.ts";

/**
 * The known HTTP/2 floods against a plaintext client listener with connection.http2 (the pair behind
 * it): rapid reset, PING and SETTINGS floods, and HEADERS followed by CONTINUATION frames that never end
 * the header block. Each may end the offending connection; none may end the proxy or keep another
 * caller from being served.
 */
const dir = tempDir();
let target: http2.Http2Server;
let clientPort: number;
let proxy: Proc;

beforeAll(async () => {
  const apis = await startProdApis(dir, ["web", "api"]);
  target = http2.createServer((req, res) => {
    req.resume();
    req.on("end", () => res.end("ok"));
  });
  await new Promise<void>((r) => target.listen(0, "127.0.0.1", () => r()));
  const pair = await startHttp2Pair(apis, (target.address() as { port: number }).port);
  clientPort = pair.clientPort;
  proxy = pair.client;
});
afterAll(async () => {
  await stopAll();
  target.close();
});

/** One ordinary call on a new connection: what every other caller must still get. */
async function served(): Promise<string> {
  const session = http2.connect(`http://127.0.0.1:${clientPort}`);
  const req = session.request({ ":path": "/" });
  req.end();
  let body = "";
  req.on("data", (d) => {
    body += d;
  });
  await new Promise((resolve, reject) => {
    req.on("end", resolve);
    req.on("error", reject);
  });
  session.close();
  return body;
}

const frame = (type: number, flags: number, stream: number, payload: Buffer) => {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(stream, 5);
  return Buffer.concat([head, payload]);
};

test("rapid reset: 5,000 streams opened and cancelled at once", async () => {
  const session = http2.connect(`http://127.0.0.1:${clientPort}`);
  session.on("error", () => {});
  for (let i = 0; i < 5000 && !session.destroyed; i++) {
    const req = session.request({ ":path": "/" });
    req.on("error", () => {});
    req.close(http2.constants.NGHTTP2_CANCEL);
  }
  session.destroy();
  expect(await served()).toBe("ok");
  expect(proxy.proc.exitCode).toBeNull();
});

test("PING and SETTINGS floods", async () => {
  const session = http2.connect(`http://127.0.0.1:${clientPort}`);
  session.on("error", () => {});
  await new Promise((r) => session.once("connect", r));
  try {
    for (let i = 0; i < 20_000; i++) session.ping(() => {});
    for (let i = 0; i < 5_000; i++) session.settings({ enablePush: false });
  } catch {
    // The client library may refuse to queue more: what reached the proxy is the flood.
  }
  session.destroy();
  expect(await served()).toBe("ok");
  expect(proxy.proc.exitCode).toBeNull();
});

test("CONTINUATION frames that never end a header block: the proxy stops reading and closes", async () => {
  const socket = net.connect(clientPort, "127.0.0.1");
  socket.on("error", () => {});
  await new Promise((r) => socket.once("connect", r));
  const closed = new Promise<void>((r) => socket.once("close", () => r()));
  let isClosed = false;
  void closed.then(() => {
    isClosed = true;
  });
  socket.write("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
  socket.write(frame(4, 0, 0, Buffer.alloc(0))); // SETTINGS
  // HEADERS for stream 1 without END_HEADERS: :method GET, :path /, :scheme http (static table).
  socket.write(frame(1, 0, 1, Buffer.from([0x82, 0x84, 0x86])));
  // Then 1 KB literal fields in CONTINUATION frames, none with END_HEADERS, until the proxy stops taking
  // them (bounded: 20,000 frames, about 20 MB).
  const field = Buffer.concat([
    Buffer.from([0x40, 0x05]),
    Buffer.from("x-aaa"),
    Buffer.from([0x7f, 0x81, 0x07]),
    Buffer.alloc(1000, 0x62),
  ]);
  for (let i = 0; i < 20_000 && !isClosed; i++) {
    if (socket.write(frame(9, 0, 1, field))) continue;
    const drained = await Promise.race([
      new Promise<boolean>((r) => socket.once("drain", () => r(true))),
      closed.then(() => false),
    ]);
    if (!drained) break;
  }
  await closed;
  expect(await served()).toBe("ok");
  expect(proxy.proc.exitCode).toBeNull();
});
