import { afterAll, beforeAll, expect, test } from "bun:test";
import http2 from "node:http2";
import { type DevApi, startProdApis, tempDir } from "../support/dev-api.ts";
import { startHttp2Pair } from "../support/http2-pair.ts";
import { metricValue } from "../support/metrics.ts";
import { freePort } from "../support/net.ts";
import { type Proc, stopAll } from "../support/proc.ts";
import { logLines, waitForLog } from "../support/proxy.ts";
import { waitUntil } from "../support/wait.ts";

/**
 * Streams their callers cancel, through a client→server pair with connection.http2: the caller's doing,
 * not a failure. Each is counted under status 499 and logged at debug; a burst of them is one info line
 * with the count; no "upstream failure" warning is written for them. On the HTTP/2 relay and on the
 * full path (a client listener with the dummy middleware).
 */
const dir = tempDir();
let apis: Record<string, DevApi>;
const pairs: Record<string, { client: Proc; clientPort: number; metricsPort: number }> = {};
/** Requests the target has received and not answered: it answers none of them. */
let held = 0;
const target = http2.createServer();
target.on("stream", (stream) => {
  held++;
  stream.on("error", () => {});
  stream.on("close", () => held--);
});

beforeAll(async () => {
  apis = await startProdApis(dir, ["web", "api"]);
  await new Promise<void>((r) => target.listen(0, "127.0.0.1", () => r()));
  const targetPort = (target.address() as { port: number }).port;
  for (const [path, client] of [
    ["relay", {}],
    ["full", { middlewares: [{ type: "dummy" }] }],
  ] as const) {
    const metricsPort = await freePort();
    const pair = await startHttp2Pair(apis, targetPort, { metricsAddr: `127.0.0.1:${metricsPort}`, client });
    pairs[path] = { client: pair.client, clientPort: pair.clientPort, metricsPort };
  }
});
afterAll(async () => {
  await stopAll();
  target.close();
});

test.each([
  "relay",
  "full",
])("%s: 50 streams cancelled by their caller: counted as 499, one info line, no failure logged", async (path) => {
  const { client, clientPort, metricsPort } = pairs[path] as (typeof pairs)[string];
  const session = http2.connect(`http://127.0.0.1:${clientPort}`);
  const streams = Array.from({ length: 50 }, () => {
    const s = session.request({ ":method": "POST", ":path": "/" }, { endStream: false });
    s.on("error", () => {});
    return s;
  });
  await waitUntil("50 requests at the target", () => held === 50, 15_000);
  for (const s of streams) s.close(http2.constants.NGHTTP2_CANCEL);
  await waitUntil("the target sees every stream end", () => held === 0, 15_000);

  const line = await waitForLog(client, "requests cancelled by their callers", 20_000);
  expect(line).toMatchObject({ level: "info", listener: "grpc", count: 50 });
  expect(await metricValue(metricsPort, 'svc_proxy_http_requests_total{listener="grpc",code="499"}')).toBe(
    50,
  );
  expect(logLines(client).filter((l) => l.level === "warn" || l.level === "error")).toEqual([]);
  session.close();
}, 60_000);
