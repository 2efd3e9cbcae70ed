import "reflect-metadata";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createServer as httpServer, type Server } from "node:http";
import http2 from "node:http2";
import { type Server as TcpServer, createServer as tcpServer } from "node:net";
import { join } from "node:path";
import { type TLSSocket, connect as tlsConnect } from "node:tls";
import { DevCa } from "../../lib/dev/ca.ts";
import { derToPem, parseCert } from "../../lib/spiffe/cert.ts";
import { type DevApi, prodId as ID, onlyProd as only, startProdApis, tempDir } from "../support/dev-api.ts";
import { freePort } from "../support/net.ts";
import { stopAll } from "../support/proc.ts";
import { startSvcProxy } from "../support/proxy.ts";
import { waitUntil } from "../support/wait.ts";

/**
 * A caller whose certificate expires while its connection is open: HTTP listeners (relay and full path,
 * and the HTTP/2 relay) serve no request after the expiry and close the connection; a TCP listener ends the connection at the
 * expiry. The certificate is the thing under test, so the waits are for the clock to pass its notAfter.
 */
const dir = tempDir();
let apis: Record<string, DevApi>;
let upstream: Server;
let h2Upstream: http2.Http2Server;
let echo: TcpServer;
const ports: Record<string, number> = {};
let ca: DevCa;
let caller: { cert: string; key: string; ca: string; notAfter: number };

/** A fresh two-second certificate for the caller: each test watches its own expire. */
async function freshCaller(): Promise<void> {
  const issued = await ca.issue({ uris: [ID("web")], ttlMs: 2_000 });
  caller = {
    cert: derToPem(issued.certDer),
    key: derToPem(issued.keyDer, "PRIVATE KEY"),
    ca: derToPem(ca.caDer),
    // As the certificate says it (whole seconds), not as asked for.
    notAfter: parseCert(issued.certDer).notAfter.getTime(),
  };
}

beforeAll(async () => {
  apis = await startProdApis(dir, ["api"]);
  upstream = httpServer((_req, res) => res.end("ok"));
  h2Upstream = http2.createServer((_req, res) => res.end("ok"));
  echo = tcpServer((s) => s.pipe(s));
  await Promise.all([
    new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r)),
    new Promise<void>((r) => echo.listen(0, "127.0.0.1", r)),
    new Promise<void>((r) => h2Upstream.listen(0, "127.0.0.1", r)),
  ]);
  const h2Port = (h2Upstream.address() as { port: number }).port;
  const httpPort = (upstream.address() as { port: number }).port;
  const echoPort = (echo.address() as { port: number }).port;
  for (const k of ["relay", "full", "tcp", "h2"]) ports[k] = await freePort();
  const common = { mode: "server", source: { spiffe_ids: only("web") } };
  await startSvcProxy({
    spiffe: { workload_socket_path: apis.api?.socket },
    metricsAddr: "0",
    listeners: [
      {
        name: "relay",
        address: `127.0.0.1:${ports.relay}`,
        target: { url: `http://127.0.0.1:${httpPort}` },
        ...common,
      },
      {
        name: "full",
        address: `127.0.0.1:${ports.full}`,
        target: { url: `http://127.0.0.1:${httpPort}` },
        middlewares: [{ type: "dummy" }],
        ...common,
      },
      {
        name: "h2",
        address: `127.0.0.1:${ports.h2}`,
        target: { url: `http://127.0.0.1:${h2Port}` },
        connection: { http2: true },
        ...common,
      },
      {
        name: "tcp",
        protocol: "tcp",
        address: `127.0.0.1:${ports.tcp}`,
        target: { url: `tcp://127.0.0.1:${echoPort}` },
        ...common,
      },
    ],
  });
  ca = await DevCa.open("example.org", join(dir, "ca"));
});
afterAll(async () => {
  upstream.close();
  h2Upstream.close();
  echo.close();
  await stopAll();
});

function open(port: number): Promise<{ socket: TLSSocket; received: () => string; closed: Promise<void> }> {
  return new Promise((resolve, reject) => {
    let got = "";
    const socket = tlsConnect({ host: "127.0.0.1", port, ...caller, rejectUnauthorized: false }, () =>
      resolve({ socket, received: () => got, closed }),
    );
    const closed = new Promise<void>((r) => socket.once("close", () => r()));
    socket.on("data", (d: Buffer) => {
      got += d.toString("latin1");
    });
    socket.once("error", reject);
  });
}

const afterExpiry = () =>
  waitUntil("the caller's certificate to expire", () => Date.now() > caller.notAfter + 1_100, 15_000);
const REQUEST = "GET / HTTP/1.1\r\nhost: x\r\n\r\n";

describe("a caller's certificate expires on an open connection", () => {
  for (const kind of ["relay", "full"] as const) {
    test(`${kind}: served before the expiry, nothing after it, and the connection closed`, async () => {
      await freshCaller();
      const c = await open(ports[kind] as number);
      c.socket.on("error", () => {});
      c.socket.write(REQUEST);
      await waitUntil("the first response", () => /\r\n\r\nok$/.test(c.received()), 10_000);
      await afterExpiry();
      if (!c.socket.destroyed) c.socket.write(REQUEST);
      await c.closed;
      expect(c.received().match(/HTTP\/1\.1 200/g)).toHaveLength(1);
    }, 30_000);
  }

  test("HTTP/2 relay: served before the expiry; after it the stream is refused and the connection closed", async () => {
    await freshCaller();
    const session = http2.connect(`https://127.0.0.1:${ports.h2}`, { ...caller, rejectUnauthorized: false });
    session.on("error", () => {});
    const closed = new Promise<void>((r) => session.once("close", () => r()));
    const get = () =>
      new Promise<string>((resolve, reject) => {
        const req = session.request({ ":path": "/" });
        let body = "";
        req.on("data", (d: Buffer) => {
          body += d;
        });
        req.on("end", () => resolve(body));
        req.on("error", reject);
        req.end();
      });
    expect(await get()).toBe("ok");
    await afterExpiry();
    // The idle connection is retired at the expiry (GOAWAY), or a stream opened just then is refused.
    const late = await get().then(
      () => "served",
      (e: Error & { code?: string }) => e.code ?? e.message,
    );
    expect(late).not.toBe("served");
    await closed;
  }, 30_000);

  test("tcp: bytes flow before the expiry, and the proxy ends the connection at it", async () => {
    await freshCaller();
    const c = await open(ports.tcp as number);
    c.socket.on("error", () => {});
    c.socket.write("ping");
    await waitUntil("the echo", () => c.received() === "ping", 10_000);
    await c.closed;
    expect(Date.now()).toBeGreaterThan(caller.notAfter);
  }, 30_000);
});
