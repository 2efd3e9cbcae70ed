import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createServer, request, type Server } from "node:http";
import type { SvidSource } from "../../lib/spiffe/x509-source.ts";
import type { ListenerConfig } from "../../proxy/config/validate.ts";
import { type RunningListener, startHttpListener } from "../../proxy/http/listener.ts";
import { createLogger } from "../../proxy/log.ts";
import { registerMiddleware } from "../../proxy/middleware/chain.ts";
import { freePort } from "../support/net.ts";

/**
 * The middleware chain as later middlewares will use it: one that awaits before passing the request on
 * must still see, and pass on, every byte of a streamed body. In-process, plaintext client-mode listener.
 */
let upstream: Server;
let upstreamPort: number;
let listener: RunningListener;
const order: string[] = [];

beforeAll(async () => {
  upstreamPort = await freePort();
  upstream = createServer((req, res) => {
    let n = 0;
    req.on("data", (d: Buffer) => {
      n += d.length;
    });
    req.on("end", () => res.end(JSON.stringify({ bytes: n, order: req.headers["x-order"] })));
  });
  await new Promise<void>((r) => upstream.listen(upstreamPort, "127.0.0.1", () => r()));
  for (const name of ["first", "second"]) {
    registerMiddleware(`test-${name}`, () => async (req, next) => {
      await Bun.sleep(30); // a middleware that does I/O before passing the request on
      order.push(`${name} in`);
      req.headers["x-order"] = `${req.headers["x-order"] ?? ""}${name},`;
      const res = await next(req);
      order.push(`${name} out`);
      return res;
    });
  }
  const config: ListenerConfig = {
    name: "chain",
    address: { host: "127.0.0.1", port: await freePort() },
    mode: "client",
    protocol: "http",
    target: new URL(`http://127.0.0.1:${upstreamPort}`),
    targetMtls: false,
    sourceIds: [],
    targetIds: [],
    timeouts: { readMs: 15_000, writeMs: 60_000, idleMs: 120_000 },
    disableKeepalive: false,
    middlewares: [
      { type: "test-first" },
      { type: "test-second" },
    ] as unknown as ListenerConfig["middlewares"],
  };
  // No SPIFFE identity is used on a plaintext client-mode hop.
  listener = await startHttpListener(config, {
    source: {} as SvidSource,
    log: createLogger({ level: "error", encoder: "json" }),
  });
});
afterAll(async () => {
  await listener.close(0);
  upstream.close();
});

describe("middleware chain", () => {
  test("the first middleware sees the request first and the response last; a streamed body arrives whole", async () => {
    const body = Buffer.alloc(1024 * 1024, 7);
    const reply = await new Promise<string>((resolve, reject) => {
      const req = request({ host: "127.0.0.1", port: listener.port, method: "POST", path: "/" }, (res) => {
        let text = "";
        res.on("data", (d) => {
          text += d;
        });
        res.on("end", () => resolve(text));
      });
      req.on("error", reject);
      // Streamed in pieces while the middlewares are still waiting.
      for (let i = 0; i < 16; i++) req.write(body.subarray(i * 65536, (i + 1) * 65536));
      req.end();
    });
    expect(JSON.parse(reply)).toEqual({ bytes: 1024 * 1024, order: "first,second," });
    expect(order).toEqual(["first in", "second in", "second out", "first out"]);
  });
});
