import { afterAll, beforeAll, expect, test } from "bun:test";
import http2 from "node:http2";
import net from "node:net";
import tls from "node:tls";
import { X509Source } from "../../lib/spiffe/x509-source.ts";
import { type DevApi, startProdApis, svidClientTls, tempDir } from "../support/dev-api.ts";
import { RawCaller } from "../support/h2-raw-caller.ts";
import { h2Get, startHttp2Pair, startOkHttp2Target } from "../support/http2-pair.ts";
import { freePort } from "../support/net.ts";
import { type Proc, stopAll } from "../support/proc.ts";
import { waitForLog } from "../support/proxy.ts";
import { waitUntil } from "../support/wait.ts";

/**
 * The known HTTP/2 floods against a plaintext client listener with connection.http2 (the pair behind
 * it): rapid reset, PING and SETTINGS floods, and HEADERS followed by CONTINUATION frames that never end
 * the header block. Each ends the offending connection with a log line and a metric; none ends the proxy
 * or keeps another caller from being served.
 */
const dir = tempDir();
let target: Awaited<ReturnType<typeof startOkHttp2Target>>;
let clientPort: number;
let metricsPort: number;
let proxy: Proc;
let server: Proc;
let serverPort: number;
let apis: Record<string, DevApi>;

beforeAll(async () => {
  apis = await startProdApis(dir, ["web", "api"]);
  target = await startOkHttp2Target();
  metricsPort = await freePort();
  const pair = await startHttp2Pair(apis, target.port, { metricsAddr: `127.0.0.1:${metricsPort}` });
  clientPort = pair.clientPort;
  proxy = pair.client;
  server = pair.server;
  serverPort = pair.serverPort;
});

/** The log line of a caller connection ended for `reason`, and the count of them in /metrics. */
async function ended(reason: string): Promise<{ line: Record<string, unknown>; count: number }> {
  const line = await waitForLog(proxy, "caller HTTP/2 connection ended", 10_000, { reason });
  return { line, count: await endedCount(reason) };
}

/** The count of caller connections ended for `reason`, from /metrics. */
async function endedCount(reason: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const count = new RegExp(
    `^svc_proxy_http2_connections_ended_total\\{listener="grpc",reason="${reason}"\\} (\\d+)$`,
    "m",
  ).exec(text)?.[1];
  return Number(count ?? 0);
}
afterAll(async () => {
  await stopAll();
  target.close();
});

/** One ordinary call, on a new connection or `session`: what every other caller must still get. */
const served = (session = http2.connect(`http://127.0.0.1:${clientPort}`)) => h2Get(session);

/** How long a flood may take to be ended by the proxy, well below the test's own limit. */
const FLOOD_MS = 15_000;

const frame = RawCaller.bytes;
/** :method GET, :path /, :scheme http, from the static table. */
const GET = Buffer.from([0x82, 0x84, 0x86]);

/**
 * Opens a raw connection, sends the preface and SETTINGS, then `frames` as fast as the proxy takes them
 * (until it stops reading or closes). With `hangUp`, our side then ends the connection; either way this
 * resolves once the connection is closed. Frames are written as bytes: a client library would hold most
 * of them back (outstanding PINGs and SETTINGS are capped) and could not send what an attacker sends.
 */
async function flood(
  frames: Iterable<Buffer>,
  hangUp: boolean,
  open: () => net.Socket = () => net.connect(clientPort, "127.0.0.1"),
): Promise<void> {
  const socket = open();
  socket.on("error", () => {});
  // A flood the proxy does not end fails within FLOOD_MS, saying where it stopped, with the proxies' logs
  // (a connection left open once was Bun keeping a TLS connection after its session ended).
  const within = <T>(step: string, p: Promise<T>): Promise<T> => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const state = {
          step,
          destroyed: socket.destroyed,
          written: socket.bytesWritten,
          read: socket.bytesRead,
        };
        socket.destroy();
        reject(
          new Error(
            `flood not ended within ${FLOOD_MS} ms: ${JSON.stringify(state)}\nserver proxy: ${server.stderr().slice(-3000)}\nclient proxy: ${proxy.stderr().slice(-3000)}`,
          ),
        );
      }, FLOOD_MS);
    });
    return Promise.race([p, late]).finally(() => clearTimeout(timer));
  };
  await within(
    "connect",
    new Promise((r) => socket.once(socket instanceof tls.TLSSocket ? "secureConnect" : "connect", r)),
  );
  const closed = new Promise<void>((r) => socket.once("close", () => r()));
  let isClosed = false;
  void closed.then(() => {
    isClosed = true;
  });
  socket.write("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
  socket.write(frame(4, 0, 0, Buffer.alloc(0))); // SETTINGS
  for (const f of frames) {
    if (isClosed) break;
    if (socket.write(f)) continue;
    const drained = await within(
      "send",
      Promise.race([
        new Promise<boolean>((r) => socket.once("drain", () => r(true))),
        closed.then(() => false),
      ]),
    );
    if (!drained) break;
  }
  if (hangUp) socket.end();
  await within("close", closed);
}

function* repeat(n: number, make: (i: number) => Buffer[]): Iterable<Buffer> {
  for (let i = 0; i < n; i++) yield* make(i);
}

// Our side never hangs up in these: the proxy must end each flood.
test("rapid reset: 5,000 streams opened and cancelled at once", async () => {
  const cancel = Buffer.alloc(4);
  cancel.writeUInt32BE(http2.constants.NGHTTP2_CANCEL);
  // HEADERS (END_HEADERS, END_STREAM) then RST_STREAM, on streams 1, 3, 5, …
  await flood(
    repeat(5000, (i) => [frame(1, 0x5, 2 * i + 1, GET), frame(3, 0, 2 * i + 1, cancel)]),
    false,
  );
  const { line, count } = await ended("rapid_reset");
  expect(line).toMatchObject({ level: "warn", listener: "grpc", remote: "127.0.0.1" });
  expect(count).toBe(1);
  expect(await served()).toBe("ok");
  expect(proxy.proc.exitCode).toBeNull();
});

test("streams the proxy resets at the target for a caller's errors count as its resets (5,000 streams)", async () => {
  // Each stream is opened (HEADERS without END_STREAM, so the target holds it), then made to fail by a
  // WINDOW_UPDATE of 0: the proxy resets it at the target, as a caller's RST_STREAM would.
  const before = await endedCount("rapid_reset");
  const zero = Buffer.alloc(4);
  await flood(
    repeat(5000, (i) => [frame(1, 0x4, 2 * i + 1, GET), frame(8, 0, 2 * i + 1, zero)]),
    false,
  );
  await waitUntil(
    "one more rapid_reset",
    async () => (await endedCount("rapid_reset")) === before + 1,
    10_000,
  );
  expect(await served()).toBe("ok");
  expect(proxy.proc.exitCode).toBeNull();
});

test("PING and SETTINGS floods", async () => {
  await flood(
    repeat(20_000, (i) =>
      i < 5_000
        ? [frame(6, 0, 0, Buffer.alloc(8)), frame(4, 0, 0, Buffer.alloc(0))]
        : [frame(6, 0, 0, Buffer.alloc(8))],
    ),
    false,
  );
  const { line, count } = await ended("control_flood");
  // Our budget ends it; on a loaded machine the runtime may first find the answers it queued piling up
  // (h2-guard.ts names both control_flood).
  expect([
    "more than 1000 PING and SETTINGS frames (100 a second)",
    "Flooding was detected in this HTTP/2 session, and it must be closed",
  ]).toContain(line.detail as string);
  expect(count).toBe(1);
  expect(await served()).toBe("ok");
  expect(proxy.proc.exitCode).toBeNull();
});

test("a PING flood over SPIFFE mTLS (ALPN h2) to the server-mode listener ends that connection", async () => {
  const source = await X509Source.open({ address: apis.web?.socket as string });
  await flood(
    repeat(5_000, () => [frame(6, 0, 0, Buffer.alloc(8))]),
    false,
    () =>
      tls.connect({ host: "127.0.0.1", port: serverPort, ...svidClientTls(source), ALPNProtocols: ["h2"] }),
  );
  source.close();
  expect(
    await waitForLog(server, "caller HTTP/2 connection ended", 10_000, { reason: "control_flood" }),
  ).toMatchObject({ level: "warn", listener: "grpc" });
  expect(await served()).toBe("ok");
  expect(server.proc.exitCode).toBeNull();
});

test("a caller that pings as a keepalive does keeps its connection", async () => {
  const session = http2.connect(`http://127.0.0.1:${clientPort}`);
  for (let i = 0; i < 200; i++)
    await new Promise<void>((resolve, reject) => session.ping((e) => (e ? reject(e) : resolve())));
  expect(await served(session)).toBe("ok");
});

test("CONTINUATION frames that never end a header block: the proxy stops reading and closes", async () => {
  // HEADERS for stream 1 without END_HEADERS, then 1 KB literal fields in CONTINUATION frames, none with
  // END_HEADERS (bounded: 20,000 frames, about 20 MB). Our side never hangs up: the proxy must.
  const field = Buffer.concat([
    Buffer.from([0x40, 0x05]),
    Buffer.from("x-aaa"),
    Buffer.from([0x7f, 0x81, 0x07]),
    Buffer.alloc(1000, 0x62),
  ]);
  await flood(
    (function* () {
      yield frame(1, 0, 1, GET);
      yield* repeat(20_000, () => [frame(9, 0, 1, field)]);
    })(),
    false,
  );
  expect((await ended("protocol_error")).count).toBe(1);
  expect(await served()).toBe("ok");
  expect(proxy.proc.exitCode).toBeNull();
});

test("empty CONTINUATION frames that never end a header block: refused by their count, not left to grow", async () => {
  // Empty frames add nothing to the block's size; each still costs the proxy its bookkeeping. 200,000 of
  // them (1.8 MB) would be held until the idle timeout if only octets were counted.
  const before = await endedCount("protocol_error");
  await flood(
    (function* () {
      yield frame(1, 0, 1, GET);
      yield* repeat(200_000, () => [frame(9, 0, 1, Buffer.alloc(0))]);
    })(),
    false,
  );
  const line = await waitForLog(proxy, "caller HTTP/2 connection ended", 10_000, {
    detail: "a header block in more than 32 frames",
  });
  expect(line).toMatchObject({ level: "warn", reason: "protocol_error" });
  expect(await endedCount("protocol_error")).toBe(before + 1);
  expect(await served()).toBe("ok");
  expect(proxy.proc.exitCode).toBeNull();
});
