import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { Agent, createServer, request, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { SvidSource } from "../../lib/spiffe/x509-source.ts";
import type { ListenerConfig } from "../../proxy/config/types.ts";
import { startHttpListener } from "../../proxy/http/full/listener.ts";
import type { RunningListener } from "../../proxy/listener.ts";
import { createLogger } from "../../proxy/log.ts";
import { registerMiddleware } from "../../proxy/middleware/chain.ts";
import type { Notary } from "../../proxy/notary-service/notary.ts";
import { SqliteNotaryStore } from "../../proxy/notary-service/records-sqlite.ts";
import { freePort } from "../support/net.ts";
import { listenerConfig } from "../support/server-listener.ts";

/**
 * The middleware chain as later middlewares will use it: one that awaits before passing the request on
 * must still see, and pass on, every byte of a streamed body. In-process, plaintext client-mode listener.
 */
let upstream: Server;
let upstreamPort: number;
let listener: RunningListener;
let refusing: RunningListener;
const order: string[] = [];
/** The plaintext client-mode listener the tests start variants of. */
let config: ListenerConfig;

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
  config = listenerConfig({
    name: "chain",
    address: { host: "127.0.0.1", port: await freePort() },
    mode: "client",
    target: new URL(`http://127.0.0.1:${upstreamPort}`),
    middlewares: [
      { type: "test-first" },
      { type: "test-second" },
    ] as unknown as ListenerConfig["middlewares"],
  });

  // No SPIFFE identity is used on a plaintext client-mode hop.
  listener = await startHttpListener(config, {
    source: {} as SvidSource,
    log: createLogger({ level: "error", encoder: "json" }),
  });
  refusing = await startHttpListener(
    {
      ...config,
      name: "refusing",
      address: { host: "127.0.0.1", port: await freePort() },
      middlewares: [{ type: "openai", allowUnknown: false }],
    },
    { source: {} as SvidSource, log: createLogger({ level: "error", encoder: "json" }) },
  );
});
afterAll(async () => {
  await listener.close(0);
  await refusing.close(0);
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

  test("a refusal made before the body is read reaches the caller, and the connection serves the next request", async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const post = (path: string, headers: Record<string, string> = {}) =>
      new Promise<{ status: number; text: string; socket: unknown }>((resolve, reject) => {
        const req = request(
          { host: "127.0.0.1", port: refusing.port, method: "POST", path, agent, headers },
          (res) => {
            let text = "";
            res.on("data", (d) => {
              text += d;
            });
            res.on("end", () => resolve({ status: res.statusCode ?? 0, text, socket: res.socket }));
          },
        );
        req.on("error", reject);
        req.end(Buffer.alloc(32 * 1024, 1));
      });
    const first = await post("/v1/embeddings");
    expect(first.status).toBe(403);
    expect(first.text).toContain("only POST /v1/chat/completions");
    const second = await post("/v1/chat/completions", { "svc-notarization-level": "all" });
    expect(second.status).toBe(400);
    expect(second.text).toContain("unknown notarization level");
    expect(second.socket).toBe(first.socket);
    agent.destroy();
    // Refused for its size before a byte of its body is read; the pooled connection must still work.
    const url = `http://127.0.0.1:${refusing.port}/v1/chat/completions`;
    const big = await fetch(url, { method: "POST", body: Buffer.alloc(2 * 1024 * 1024, 32) });
    expect(big.status).toBe(413);
    await big.text();
    const next = await fetch(url, {
      method: "POST",
      headers: { "svc-notarization-level": "all" },
      body: "{}",
      signal: AbortSignal.timeout(10_000),
    });
    expect(next.status).toBe(400);
  });
});

describe("notary-query and openai in one chain (rule: notary-query goes first)", () => {
  test("after openai, notary queries are refused by its path filter; before it, they are answered", async () => {
    const dir = mkdtempSync(join(tmpdir(), "svc-chain-notary-"));
    const store = SqliteNotaryStore.open(join(dir, "notary.db"));
    const receiptId = "R".repeat(43);
    await store.logExchange(
      {
        requestId: "r-1",
        statementId: "S".repeat(43),
        level: "signRequest",
        method: "POST",
        path: "/v1/chat/completions",
        requestHeaders: {},
        requestBody: new Uint8Array(),
        status: 200,
        responseHeaders: {},
        responseBody: new Uint8Array(),
      },
      { id: receiptId, jws: "x.y.z" },
    );
    const notary = { store, checkServing() {} } as unknown as Notary;
    const start = async (name: string, middlewares: ListenerConfig["middlewares"]) =>
      startHttpListener(
        { ...config, name, address: { host: "127.0.0.1", port: await freePort() }, middlewares },
        { source: {} as SvidSource, log: createLogger({ level: "error", encoder: "json" }), notary },
      );
    const wrong = await start("openai-first", [
      { type: "openai", allowUnknown: false },
      { type: "notary-query" },
    ]);
    const right = await start("query-first", [
      { type: "notary-query" },
      { type: "openai", allowUnknown: false },
    ]);
    try {
      const refused = await fetch(`http://127.0.0.1:${wrong.port}/.svc/receipt/${receiptId}`);
      expect(refused.status).toBe(403);
      const answered = await fetch(`http://127.0.0.1:${right.port}/.svc/receipt/${receiptId}`);
      expect(answered.status).toBe(200);
      expect(((await answered.json()) as { id: string }).id).toBe(receiptId);
    } finally {
      await wrong.close(0);
      await right.close(0);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("the openai filter and compression", () => {
  test("the target is asked for an uncompressed answer, which is filtered; one compressed anyway is refused (502)", async () => {
    const seen: (string | undefined)[] = [];
    const target = createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        seen.push(req.headers["accept-encoding"]);
        const body = JSON.stringify({ id: "c", choices: [], leak: "outside the model" });
        if (req.headers["x-test-gzip-anyway"] || req.headers["accept-encoding"]?.includes("gzip")) {
          res.writeHead(200, { "content-type": "application/json", "content-encoding": "gzip" });
          res.end(Bun.gzipSync(Buffer.from(body)));
        } else {
          res.writeHead(200, { "content-type": "application/json" });
          res.end(body);
        }
      });
    });
    const port = await freePort();
    await new Promise<void>((r) => target.listen(port, "127.0.0.1", () => r()));
    const filtering = await startHttpListener(
      {
        ...config,
        name: "openai-gzip",
        address: { host: "127.0.0.1", port: await freePort() },
        target: new URL(`http://127.0.0.1:${port}`),
        middlewares: [{ type: "openai", allowUnknown: false }],
      },
      { source: {} as SvidSource, log: createLogger({ level: "error", encoder: "json" }) },
    );
    const ask = (headers: Record<string, string>, body = '{"model":"m","messages":[]}') =>
      new Promise<{ status: number; headers: Record<string, unknown>; body: string }>((resolve, reject) => {
        const r = request(
          `http://127.0.0.1:${filtering.port}/v1/chat/completions`,
          { method: "POST", headers: { "content-type": "application/json", ...headers } },
          (res) => {
            let text = "";
            res.setEncoding("latin1");
            res.on("data", (d: string) => {
              text += d;
            });
            res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
          },
        );
        r.on("error", reject);
        r.end(body);
      });
    try {
      const asked = await ask({ "accept-encoding": "gzip, br" });
      expect(asked.status).toBe(200);
      expect(asked.headers["content-encoding"]).toBeUndefined();
      expect(JSON.parse(asked.body)).toEqual({ id: "c", choices: [] });
      expect(seen).toEqual(["identity"]);
      const forced = await ask({ "x-test-gzip-anyway": "1" });
      expect(forced.status).toBe(502);
      expect(forced.body).toContain('openai: the target answered with Content-Encoding "gzip"');
      // Arrays nested past the limit are refused, and the listener serves on.
      const deep = await ask({}, `{"model":"m","messages":${"[".repeat(100_000)}${"]".repeat(100_000)}}`);
      expect(deep.status).toBe(400);
      expect(deep.body).toContain("nests deeper than 64 levels");
      expect((await ask({})).status).toBe(200);
    } finally {
      await filtering.close(0);
      target.close();
    }
  });
});

describe("the notary's headers", () => {
  test("with the notary on, a target's Svc-Receipt* and Svc-Workload-* headers and HTTP/2 trailers do not reach the caller", async () => {
    const http2 = await import("node:http2");
    const forged = { "svc-receipt-id": "R".repeat(43), "svc-workload-statement": "a.b.c" };
    const target = http2.createServer((_req, res) => {
      res.writeHead(200, { "content-type": "text/plain", ...forged, "x-kept": "1" });
      res.addTrailers({ ...forged, "x-trailer-kept": "1" });
      res.end("answer");
    });
    const port = await freePort();
    await new Promise<void>((r) => target.listen(port, "127.0.0.1", () => r()));
    const notary = { checkServing() {} } as unknown as Notary;
    const listener = await startHttpListener(
      {
        ...config,
        name: "notary-h2",
        address: { host: "127.0.0.1", port: await freePort() },
        target: new URL(`http://127.0.0.1:${port}`),
        http2: true,
        middlewares: [{ type: "dummy", message: "" }] as ListenerConfig["middlewares"],
      },
      { source: {} as SvidSource, log: createLogger({ level: "error", encoder: "json" }), notary },
    );
    const session = http2.connect(`http://127.0.0.1:${listener.port}`);
    try {
      const got = await new Promise<{
        headers: Record<string, unknown>;
        trailers: Record<string, unknown>;
        body: string;
      }>((resolve, reject) => {
        const req = session.request({ ":path": "/" });
        let headers: Record<string, unknown> = {};
        let trailers: Record<string, unknown> = {};
        let body = "";
        req.on("response", (h) => {
          headers = h;
        });
        req.on("trailers", (t) => {
          trailers = t;
        });
        req.on("data", (d) => {
          body += d;
        });
        req.on("end", () => resolve({ headers, trailers, body }));
        req.on("error", reject);
        req.end();
      });
      expect(got.body).toBe("answer");
      expect(got.headers["x-kept"]).toBe("1");
      expect(got.trailers["x-trailer-kept"]).toBe("1");
      for (const name of Object.keys(forged)) {
        expect(got.headers[name]).toBeUndefined();
        expect(got.trailers[name]).toBeUndefined();
      }
    } finally {
      session.close();
      await listener.close(0);
      target.close();
    }
  });
});
