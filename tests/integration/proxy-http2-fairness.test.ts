import { afterAll, beforeAll, expect, test } from "bun:test";
import http2 from "node:http2";
import { startProdApis, tempDir } from "../support/dev-api.ts";
import { h2Get, startHttp2Pair } from "../support/http2-pair.ts";
import { stopAll } from "../support/proc.ts";
import { waitUntil } from "../support/wait.ts";

/**
 * No caller takes another's place at the target: through a client→server pair with connection.http2,
 * one caller holds as many requests open as its connection may (100, their bodies unfinished), and other
 * callers, over HTTP/2 and over HTTP/1.1, are still answered at once. Each caller connection has its own
 * connection to the target (docs/proxy-http.md, "gRPC and HTTP/2"), on the HTTP/2 relay and on the full
 * path (a client listener with the dummy middleware).
 */
const dir = tempDir();
const ports = { relay: 0, full: 0 };
/** Requests at the target whose bodies have not ended. */
let open = 0;
const target = http2.createServer();
target.on("stream", (stream: http2.ServerHttp2Stream) => {
  open++;
  stream.on("error", () => {});
  stream.on("close", () => open--);
  stream.resume();
  stream.on("end", () => {
    try {
      stream.respond({ ":status": 200 });
      stream.end("ok");
    } catch {
      // cancelled by its caller (Bun's node:http2 ends the body of a reset stream, then throws here)
    }
  });
});

beforeAll(async () => {
  const apis = await startProdApis(dir, ["web", "api"]);
  await new Promise<void>((r) => target.listen(0, "127.0.0.1", () => r()));
  const targetPort = (target.address() as { port: number }).port;
  ports.relay = (await startHttp2Pair(apis, targetPort)).clientPort;
  ports.full = (
    await startHttp2Pair(apis, targetPort, { client: { middlewares: [{ type: "dummy" }] } })
  ).clientPort;
});
afterAll(async () => {
  await stopAll();
  target.close();
});

test.each([
  "relay",
  "full",
] as const)("%s: a caller holding 100 requests open does not keep others from the target", async (path) => {
  const clientPort = ports[path];
  await waitUntil("no request open at the target", () => open === 0, 20_000);
  const hog = http2.connect(`http://127.0.0.1:${clientPort}`);
  hog.on("error", () => {});
  const held = Array.from({ length: 100 }, () => {
    const s = hog.request({ ":method": "POST", ":path": "/held" }, { endStream: false });
    s.on("error", () => {});
    return s;
  });
  await waitUntil("100 held requests at the target", () => open === 100, 20_000);

  // Another caller over HTTP/2, then one over HTTP/1.1: both answered while the hog's requests stay open.
  expect(await h2Get(http2.connect(`http://127.0.0.1:${clientPort}`), "/other")).toBe("ok");
  const h1 = await fetch(`http://127.0.0.1:${clientPort}/other`, { signal: AbortSignal.timeout(10_000) });
  expect(await h1.text()).toBe("ok");
  expect(open).toBe(100);

  for (const s of held) s.close(http2.constants.NGHTTP2_CANCEL);
  hog.close();
}, 60_000);
