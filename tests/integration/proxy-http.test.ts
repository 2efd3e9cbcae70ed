import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, statSync } from "node:fs";
import { createServer, type IncomingMessage, request, type Server } from "node:http";
import { connect as connectH2 } from "node:http2";
import { createServer as createHttpsServer } from "node:https";
import { connect } from "node:net";
import { join } from "node:path";
import { connect as connectTls, type TLSSocket } from "node:tls";
import { X509Source } from "../../lib/spiffe/x509-source.ts";
import { writeClusterPki } from "../e2e/testbed/pki.ts";
import {
  type DevApi,
  prodId as ID,
  onlyProd as only,
  startDevApi,
  startProdApis,
  svidClientTls,
  tempDir,
} from "../support/dev-api.ts";
import { freePort } from "../support/net.ts";
import { BUN, spawnProc, stopAll } from "../support/proc.ts";
import { logLines, startSvcProxy, waitForLog } from "../support/proxy.ts";
import { waitUntil } from "../support/wait.ts";

/**
 * HTTP through real svc-proxy processes with SVIDs from the development Workload API: client, server
 * and central modes, peer restrictions both ways, Svc-Peer-ID, keep-alive, timeouts.
 */
const dir = tempDir();
const caDir = join(dir, "ca");
const apis: Record<string, DevApi> = {};
let upstream: Server;
let upstreamPort: number;
let upstreamConnections = 0;
/** Called when the upstream has read a /slow request (it then answers after ?delay= ms). */
let onSlow: (() => void) | undefined;
const slowArrives = () =>
  new Promise<void>((resolve) => {
    onSlow = resolve;
  });

beforeAll(async () => {
  Object.assign(apis, await startProdApis(dir, ["web", "api", "db", "central"]));
  upstreamPort = await freePort();
  upstream = createServer((req, res) => {
    let body = "";
    req.on("data", (d) => {
      body += d;
    });
    req.on("end", () => {
      const delay = Number(new URL(req.url ?? "/", "http://x").searchParams.get("delay") ?? 0);
      if (req.url?.startsWith("/slow")) onSlow?.();
      setTimeout(() => {
        res.writeHead(200, { "content-type": "application/json", connection: "keep-alive" });
        res.end(JSON.stringify({ method: req.method, url: req.url, headers: req.headers, body }));
      }, delay);
    });
  });
  upstream.on("connection", () => upstreamConnections++);
  await new Promise<void>((r) => upstream.listen(upstreamPort, "127.0.0.1", () => r()));
});
afterAll(async () => {
  await stopAll();
  upstream.close();
});

const socket = (sa: string) => apis[sa]?.socket as string;

const listener = (o: Record<string, unknown>) => ({
  name: "l",
  address: `127.0.0.1:${o.port}`,
  ...o,
  port: undefined,
});
const config = (sa: string, listeners: Record<string, unknown>[], metricsAddr = "0") => ({
  spiffe: { workload_socket_path: socket(sa) },
  metricsAddr,
  listeners: listeners.map(listener),
});

/** A proxy in server mode as `api` in front of the upstream, and a client-mode proxy as `sa` in front of it. */
async function pair(
  o: {
    clientAs?: string;
    serverAllows?: string[];
    clientAllows?: string[];
    server?: Record<string, unknown>;
  } = {},
) {
  const [serverPort, clientPort] = [await freePort(), await freePort()];
  const server = await startSvcProxy(
    config("api", [
      {
        port: serverPort,
        mode: "server",
        target: { url: `http://127.0.0.1:${upstreamPort}` },
        source: { spiffe_ids: o.serverAllows ?? only("web") },
        ...o.server,
      },
    ]),
  );
  const client = await startSvcProxy(
    config(o.clientAs ?? "web", [
      {
        port: clientPort,
        mode: "client",
        target: { url: `https://127.0.0.1:${serverPort}`, spiffe_ids: o.clientAllows ?? only("api") },
        middlewares: [{ type: "dummy", message: "via-client" }],
      },
    ]),
  );
  return { server, client, clientPort, serverPort };
}

/** A client-mode proxy in front of the plaintext upstream, with the given timeouts; returns its port. */
async function plainProxy(timeouts: Record<string, string>): Promise<number> {
  const port = await freePort();
  await startSvcProxy(
    config("web", [{ port, mode: "client", target: { url: `http://127.0.0.1:${upstreamPort}` }, timeouts }]),
  );
  return port;
}

/**
 * A TLS connection to `port` as workload web (HTTP/1.1): `onUp` writes once it is up and may return a
 * cleanup; `onData` hears each read (`first` for the first). Resolves with everything received once the
 * proxy closes the connection; one still open after 10 s is destroyed, so that a hang fails the test.
 */
async function tlsUntilClose(
  port: number,
  onUp: (s: TLSSocket) => (() => void) | undefined,
  onData: (s: TLSSocket, first: boolean) => void = () => {},
): Promise<string> {
  const source = await X509Source.open({ address: socket("web") });
  const got = await new Promise<string>((resolve) => {
    let text = "";
    let cleanup: (() => void) | undefined;
    const s = connectTls(
      { host: "127.0.0.1", port, ...svidClientTls(source), ALPNProtocols: ["http/1.1"] },
      () => {
        cleanup = onUp(s);
      },
    );
    s.on("data", (d: Buffer) => {
      onData(s, text === "");
      text += d;
    });
    s.on("error", () => {});
    const bound = setTimeout(() => s.destroy(), 10_000);
    s.on("close", () => {
      clearTimeout(bound);
      cleanup?.();
      resolve(text);
    });
  });
  source.close();
  return got;
}

interface Reply {
  status: number;
  headers: IncomingMessage["headers"];
  body: string;
}

function send(
  port: number,
  path: string,
  o: {
    method?: string;
    headers?: Record<string, string>;
    body?: string;
    agent?: import("node:http").Agent;
  } = {},
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: "127.0.0.1", port, path, method: o.method ?? "GET", headers: o.headers, agent: o.agent },
      (res) => {
        let body = "";
        res.on("data", (d) => {
          body += d;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      },
    );
    req.on("error", reject);
    req.end(o.body);
  });
}

describe("HTTP client → server proxy pair", () => {
  test("the request reaches the target with the caller's SPIFFE ID; a forged Svc-Peer-ID is replaced, in any spelling", async () => {
    const { clientPort } = await pair();
    const r = await send(clientPort, "/orders?id=7", {
      method: "POST",
      body: "payload",
      headers: {
        "svc-peer-id": "spiffe://forged/id",
        svc_peer_id: "spiffe://forged/u",
        "Svc-Peer_ID": "spiffe://forged/v",
        "content-type": "text/plain",
      },
    });
    expect(r.status).toBe(200);
    const seen = JSON.parse(r.body);
    expect(seen).toMatchObject({ method: "POST", url: "/orders?id=7", body: "payload" });
    expect(seen.headers["svc-peer-id"]).toBe(ID("web"));
    expect(Object.keys(seen.headers).filter((k) => k.replaceAll("_", "-") === "svc-peer-id")).toEqual([
      "svc-peer-id",
    ]);
    expect(seen.headers["svc-dummy"]).toBe("via-client");
    expect(seen.headers["x-request-id"]).toMatch(/^[0-9a-f-]{36}$/);
    expect(r.headers["svc-dummy"]).toBe("via-client");
  });

  test("a caller that matches no source pattern is refused by the server proxy, which logs why", async () => {
    const { clientPort, server } = await pair({ clientAs: "db" });
    const r = await send(clientPort, "/");
    expect(r.status).toBe(502);
    expect(r.body).toMatch(
      /^svc-proxy: upstream https:\/\/127\.0\.0\.1:\d+ closed the connection during or right after the TLS handshake \(.+\); it may not allow this proxy's SPIFFE ID \(see its log\)\n$/,
    );
    const refusal = await waitForLog(server, "caller refused");
    expect(refusal).toMatchObject({ level: "warn", listener: "l", code: "unauthorized_peer" });
    expect(String(refusal?.reason)).toStartWith(`peer ${ID("db")} matches none of 1 allowed pattern(s)`);
  });

  test("a target whose ID matches no target pattern is refused before the request is sent", async () => {
    const before = upstreamConnections;
    const { clientPort, client } = await pair({ clientAllows: only("db") });
    const r = await send(clientPort, "/secret");
    expect(r.status).toBe(502);
    expect(r.body).toMatch(
      new RegExp(
        `^svc-proxy: upstream https://127\\.0\\.0\\.1:\\d+ refused: peer ${ID("api")} matches none of 1 allowed pattern`,
      ),
    );
    expect(upstreamConnections).toBe(before);
    expect(logLines(client).find((l) => l.msg === "upstream failure")).toMatchObject({
      failure: "target-refused",
      status: 502,
    });
  });

  test("a listen address already in use stops the proxy with a message naming the listener", async () => {
    const port = await freePort();
    const blocker = createServer(() => {});
    await new Promise<void>((r) => blocker.listen(port, "127.0.0.1", () => r()));
    const proc = spawnProc([BUN, "cmd/svc-proxy.ts"], {
      SVC_PROXY_CONFIG: JSON.stringify(
        config("api", [{ port, mode: "server", target: { url: `http://127.0.0.1:${upstreamPort}` } }]),
      ),
    });
    expect(await proc.exited).toBe(1);
    expect(proc.stderr()).toContain(
      `svc-proxy: listener l: cannot listen on 127.0.0.1:${port}: address already in use\n`,
    );
    blocker.close();
  });

  test("an unreachable target is a 502 that says so", async () => {
    const dead = await freePort();
    const port = await freePort();
    await startSvcProxy(
      config("api", [{ port, mode: "server", target: { url: `http://127.0.0.1:${dead}` } }]),
    );
    // Called directly in plaintext is not possible in server mode; use a client proxy to reach it.
    const clientPort = await freePort();
    await startSvcProxy(
      config("web", [{ port: clientPort, mode: "client", target: { url: `https://127.0.0.1:${port}` } }]),
    );
    const r = await send(clientPort, "/");
    expect(r.status).toBe(502);
    expect(r.body).toBe(`svc-proxy: upstream http://127.0.0.1:${dead} unreachable (ECONNREFUSED)\n`);
  });
});

describe("metrics", () => {
  test("/metrics counts connections, requests by status, refused callers by reason, and the SVID expiry", async () => {
    const [serverPort, metricsPort, webPort, dbPort] = [
      await freePort(),
      await freePort(),
      await freePort(),
      await freePort(),
    ];
    await startSvcProxy(
      config(
        "api",
        [
          {
            port: serverPort,
            mode: "server",
            target: { url: `http://127.0.0.1:${upstreamPort}` },
            source: { spiffe_ids: only("web") },
          },
        ],
        `127.0.0.1:${metricsPort}`,
      ),
    );
    const target = { url: `https://127.0.0.1:${serverPort}` };
    await startSvcProxy(config("web", [{ port: webPort, mode: "client", target }]));
    await startSvcProxy(config("db", [{ port: dbPort, mode: "client", target }]));
    const replies = [await send(webPort, "/a"), await send(webPort, "/b")];
    expect(replies.map((r) => r.status)).toEqual([200, 200]);
    const responseBytes = replies.reduce((n, r) => n + Buffer.byteLength(r.body), 0);
    expect((await send(dbPort, "/c")).status).toBe(502);
    // The refusal is counted when the server proxy sees the handshake end: wait for it in the scrape.
    let scrape = "";
    await waitUntil("the refusal in /metrics", async () => {
      scrape = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
      return scrape.includes('svc_proxy_denied_total{listener="l",side="source",reason="unauthorized_peer"}');
    });
    const value = (series: string) =>
      Number(new RegExp(`^${series.replace(/[{}"]/g, (c) => `\\${c}`)} (\\S+)$`, "m").exec(scrape)?.[1]);
    expect(value('svc_proxy_http_requests_total{listener="l",code="200"}')).toBe(2);
    expect(
      value('svc_proxy_denied_total{listener="l",side="source",reason="unauthorized_peer"}'),
    ).toBeGreaterThanOrEqual(1);
    expect(value('svc_proxy_connections_total{listener="l"}')).toBeGreaterThanOrEqual(1);
    expect(value('svc_proxy_http_request_duration_seconds_count{listener="l"}')).toBe(2);
    expect(value("svc_proxy_svid_expiry_timestamp_seconds")).toBeGreaterThan(Date.now() / 1000);
    // Two upstream answers passed through the server proxy: their JSON bodies, byte for byte.
    expect(value('svc_proxy_http_body_bytes_total{listener="l",direction="response"}')).toBe(responseBytes);
    // prom-client's process metrics and the build, as every Prometheus exporter has them.
    expect(value("process_resident_memory_bytes")).toBeGreaterThan(1_000_000);
    expect(value("process_open_fds")).toBeGreaterThan(3);
    expect(value("process_max_fds")).toBeGreaterThan(value("process_open_fds"));
    expect(value("process_start_time_seconds")).toBeLessThanOrEqual(Date.now() / 1000);
    expect(value("process_cpu_seconds_total")).toBeGreaterThan(0);
    expect(scrape).toMatch(/^svc_proxy_build_info\{version="[^"]+",commit="[^"]+"\} 1$/m);
    expect(scrape).not.toContain("nodejs_");
    expect((await fetch(`http://127.0.0.1:${metricsPort}/other`)).status).toBe(404);
  });
});

describe("SVID rotation under traffic", () => {
  test("both proxies rotate several times while requests flow, and no request fails", async () => {
    const rot = tempDir();
    const [web, api] = await Promise.all(
      ["web", "api"].map((sa) =>
        startDevApi({ socketPath: join(rot, `${sa}.sock`), spiffeIds: [ID(sa)], caDir, ttl: "3s" }),
      ),
    );
    const [serverPort, clientPort] = [await freePort(), await freePort()];
    const server = await startSvcProxy({
      spiffe: { workload_socket_path: api?.socket },
      metricsAddr: "0",
      listeners: [
        listener({
          port: serverPort,
          mode: "server",
          target: { url: `http://127.0.0.1:${upstreamPort}` },
          source: { spiffe_ids: only("web") },
        }),
      ],
    });
    const client = await startSvcProxy({
      spiffe: { workload_socket_path: web?.socket },
      metricsAddr: "0",
      listeners: [
        listener({
          port: clientPort,
          mode: "client",
          target: { url: `https://127.0.0.1:${serverPort}`, spiffe_ids: only("api") },
        }),
      ],
    });
    const agent = new (await import("node:http")).Agent({ keepAlive: true, maxSockets: 8 });
    const statuses: number[] = [];
    const until = Date.now() + 8000;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (Date.now() < until && statuses.length < 20_000)
          statuses.push((await send(clientPort, "/r", { agent })).status);
      }),
    );
    agent.destroy();
    expect(statuses.length).toBeGreaterThan(100);
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
    for (const p of [server, client])
      expect(logLines(p).filter((l) => l.msg === "SVID rotated").length).toBeGreaterThanOrEqual(3);
  }, 60_000);
});

describe("an upstream certificate that expires during an exchange", () => {
  test.each([
    ["the full path (a middleware)", [{ type: "dummy" }], 502],
    ["the relay", [], 200],
  ])(
    "%s: the process survives, the slow response is answered (502 when checked again), the next request is served",
    async (_name, middlewares, status) => {
      // SVIDs of three seconds: the server's certificate from the handshake expires before the slow answer.
      const short = await startDevApi({
        socketPath: join(dir, `short-${status}.sock`),
        spiffeIds: [ID("api")],
        caDir: join(dir, "ca"),
        ttl: "3s",
      });
      const [serverPort, clientPort] = [await freePort(), await freePort()];
      await startSvcProxy({
        spiffe: { workload_socket_path: short.socket },
        metricsAddr: "0",
        listeners: [
          listener({ port: serverPort, mode: "server", target: { url: `http://127.0.0.1:${upstreamPort}` } }),
        ],
      });
      const client = await startSvcProxy(
        config("web", [
          {
            port: clientPort,
            mode: "client",
            target: { url: `https://127.0.0.1:${serverPort}`, spiffe_ids: only("api") },
            middlewares,
          },
        ]),
      );
      const r = await send(clientPort, "/slow?delay=4000");
      expect(r.status).toBe(status);
      if (status === 502) expect(r.body).toMatch(/refused: invalid X\.509-SVID: .* expired at /);
      expect((await send(clientPort, "/after")).status).toBe(200);
      expect(client.proc.exitCode).toBeNull();
    },
    30_000,
  );
});

describe("HTTP/2 callers", () => {
  test("on a listener with middlewares (the full path), each request on an h2 session carries the caller's SPIFFE ID; at most 100 streams are announced", async () => {
    const { serverPort, server } = await pair({ server: { middlewares: [{ type: "dummy" }] } });
    expect(logLines(server).find((l) => l.msg === "listening")?.path).toBe("full");
    const source = await X509Source.open({ address: socket("web") });
    const session = connectH2(`https://127.0.0.1:${serverPort}`, svidClientTls(source));
    const get = (path: string) =>
      new Promise<string>((resolve, reject) => {
        const s = session.request({ ":path": path });
        let body = "";
        s.on("data", (d) => {
          body += d;
        });
        s.on("end", () => resolve(body));
        s.on("error", reject);
        s.end();
      });
    const bodies = await Promise.all(["/h2/a", "/h2/b", "/h2/c"].map(get));
    for (const b of bodies) expect(JSON.parse(b).headers["svc-peer-id"]).toBe(ID("web"));
    expect(session.remoteSettings.maxConcurrentStreams).toBe(100);
    session.close();
    source.close();
  });

  test("a relay listener (no middlewares) offers HTTP/1.1 only: an h2-only client is not served, one that offers both gets HTTP/1.1", async () => {
    const { serverPort, server } = await pair();
    expect(logLines(server).find((l) => l.msg === "listening")?.path).toBe("relay");
    const source = await X509Source.open({ address: socket("web") });
    const tlsOptions = svidClientTls(source);
    const session = connectH2(`https://127.0.0.1:${serverPort}`, tlsOptions);
    const refused = await new Promise<Error>((resolve) => session.on("error", resolve));
    expect(refused.message).toContain("h2 is not supported");
    const alpn = await new Promise<string | false | null>((resolve, reject) => {
      const s = connectTls(
        { host: "127.0.0.1", port: serverPort, ...tlsOptions, ALPNProtocols: ["h2", "http/1.1"] },
        () => {
          resolve(s.alpnProtocol);
          s.destroy();
        },
      );
      s.on("error", reject);
    });
    expect([false, null, "http/1.1"]).toContain(alpn);
    source.close();
  });
});

describe("server mode with an https:// target (ordinary HTTPS, not SPIFFE)", () => {
  test("ordinary HTTPS verification applies: refused without the CA, accepted with it", async () => {
    const pkiDir = tempDir();
    const pki = await writeClusterPki(pkiDir); // a CA and a serving certificate for 127.0.0.1
    const httpsPort = await freePort();
    const target = createHttpsServer(
      { cert: readFileSync(pki.servingCertFile), key: readFileSync(pki.servingKeyFile) },
      (_req, res) => res.end("over ordinary https"),
    );
    await new Promise<void>((r) => target.listen(httpsPort, "127.0.0.1", () => r()));
    try {
      const results: string[] = [];
      for (const env of [{}, { NODE_EXTRA_CA_CERTS: pki.caFile }] as Record<string, string>[]) {
        const [serverPort, clientPort] = [await freePort(), await freePort()];
        await startSvcProxy(
          config("api", [
            { port: serverPort, mode: "server", target: { url: `https://127.0.0.1:${httpsPort}` } },
          ]),
          [],
          env,
        );
        await startSvcProxy(
          config("web", [
            { port: clientPort, mode: "client", target: { url: `https://127.0.0.1:${serverPort}` } },
          ]),
        );
        const r = await send(clientPort, "/");
        results.push(`${r.status} ${r.body.trim()}`);
      }
      expect(results[0]).toMatch(
        new RegExp(
          `^502 svc-proxy: upstream https://127\\.0\\.0\\.1:${httpsPort} failed: .*(certificate|verify)`,
          "i",
        ),
      );
      expect(results[1]).toBe("200 over ordinary https");

      // The certificate is checked against the configured host (127.0.0.1), not against the caller's Host
      // header, which Node would take for an IP target: on both paths.
      for (const middlewares of [[], [{ type: "dummy" }]]) {
        const [serverPort, clientPort] = [await freePort(), await freePort()];
        await startSvcProxy(
          config("api", [
            {
              port: serverPort,
              mode: "server",
              target: { url: `https://127.0.0.1:${httpsPort}` },
              middlewares,
            },
          ]),
          [],
          { NODE_EXTRA_CA_CERTS: pki.caFile },
        );
        await startSvcProxy(
          config("web", [
            { port: clientPort, mode: "client", target: { url: `https://127.0.0.1:${serverPort}` } },
          ]),
        );
        const r = await send(clientPort, "/", { headers: { host: "elsewhere.example" } });
        expect(`${middlewares.length ? "full" : "relay"}: ${r.status} ${r.body.trim()}`).toBe(
          `${middlewares.length ? "full" : "relay"}: 200 over ordinary https`,
        );
      }
    } finally {
      target.close();
    }
  });
});

describe("shutdown and key log", () => {
  test("SIGTERM lets a request in flight finish, then exits 0", async () => {
    const { clientPort, server } = await pair();
    const arrived = slowArrives();
    const inFlight = send(clientPort, "/slow?delay=1200");
    await arrived;
    server.proc.kill("SIGTERM");
    expect((await inFlight).status).toBe(200);
    expect(await server.exited).toBe(0);
    expect(logLines(server).some((l) => l.msg === "shutting down" && l.signal === "SIGTERM")).toBe(true);
  });

  test("a second SIGTERM exits at once (status 1), not waiting for the request in flight", async () => {
    const { clientPort, server } = await pair();
    const arrived = slowArrives();
    const inFlight = send(clientPort, "/slow?delay=30000").catch((e: Error) => e);
    await arrived;
    server.proc.kill("SIGTERM");
    await waitForLog(server, "shutting down");
    server.proc.kill("SIGTERM");
    expect(await server.exited).toBe(1);
    expect(logLines(server).some((l) => l.msg === "second signal: exiting now")).toBe(true);
    const r = await inFlight;
    expect(r instanceof Error ? 502 : r.status).not.toBe(200);
  });

  test("keylog: TLS secrets of both hops are appended in the NSS key log format", async () => {
    const keylog = join(tempDir(), "keys.log");
    const [serverPort, port] = [await freePort(), await freePort()];
    await startSvcProxy({
      ...config("api", [
        { port: serverPort, mode: "server", target: { url: `http://127.0.0.1:${upstreamPort}` } },
      ]),
      keylog,
    });
    await startSvcProxy(
      config("web", [{ port, mode: "client", target: { url: `https://127.0.0.1:${serverPort}` } }]),
    );
    expect((await send(port, "/")).status).toBe(200);
    // Both hops' secrets: written as each handshake completes.
    let lines: string[] = [];
    await waitUntil("both hops' secrets in the key log", () => {
      lines = readFileSync(keylog, "utf8").trim().split("\n");
      return lines.length >= 5;
    });
    expect(lines.length).toBeGreaterThanOrEqual(5);
    for (const l of lines) expect(l).toMatch(/^[A-Z_0-9]+ [0-9a-f]{64} [0-9a-f]{64,96}$/);
    expect(statSync(keylog).mode & 0o777).toBe(0o600);
  });
});

describe("central mode", () => {
  test("client → central → server: the server authenticates the central proxy", async () => {
    const [serverPort, centralPort, clientPort] = [await freePort(), await freePort(), await freePort()];
    await startSvcProxy(
      config("api", [
        {
          port: serverPort,
          mode: "server",
          target: { url: `http://127.0.0.1:${upstreamPort}` },
          source: { spiffe_ids: only("central") },
        },
      ]),
    );
    const central = await startSvcProxy(
      config("central", [
        {
          port: centralPort,
          mode: "central",
          target: { url: `https://127.0.0.1:${serverPort}`, spiffe_ids: only("api") },
          source: { spiffe_ids: only("web") },
        },
      ]),
    );
    await startSvcProxy(
      config("web", [
        {
          port: clientPort,
          mode: "client",
          target: { url: `https://127.0.0.1:${centralPort}`, spiffe_ids: only("central") },
        },
      ]),
    );
    const r = await send(clientPort, "/via-central");
    expect(r.status).toBe(200);
    expect(JSON.parse(r.body).headers["svc-peer-id"]).toBe(ID("central"));
    expect(logLines(central).some((l) => l.msg === "listening")).toBe(true);
  });
});

describe("connections and timeouts", () => {
  test("keep-alive reuses upstream connections; disable_keepalive opens one per request", async () => {
    const agent = new (await import("node:http")).Agent({ keepAlive: true, maxSockets: 1 });
    const reuse = await pair();
    let before = upstreamConnections;
    for (let i = 0; i < 5; i++) expect((await send(reuse.clientPort, "/", { agent })).status).toBe(200);
    expect(upstreamConnections - before).toBe(1);
    const fresh = await pair({ server: { connection: { disable_keepalive: true } } });
    before = upstreamConnections;
    for (let i = 0; i < 5; i++) expect((await send(fresh.clientPort, "/", { agent })).status).toBe(200);
    expect(upstreamConnections - before).toBe(5);
    agent.destroy();
  });

  test("write timeout: a target slower than timeouts.write gets a 504, and the proxy does not hang", async () => {
    const { clientPort } = await pair({ server: { timeouts: { write: "300ms" } } });
    const r = await send(clientPort, "/slow?delay=2000");
    expect(r.status).toBe(504);
    expect(r.body).toBe(
      `svc-proxy: upstream http://127.0.0.1:${upstreamPort} did not answer within 300 ms\n`,
    );
  });

  test("read timeout: a request whose body never completes gets a 408", async () => {
    const port = await plainProxy({ read: "300ms" });
    const r = await new Promise<string>((resolve) => {
      const s = connect(port, "127.0.0.1", () =>
        s.write("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\npartial"),
      );
      let got = "";
      s.on("data", (d: Buffer) => {
        got += d;
      });
      s.on("close", () => resolve(got));
      setTimeout(() => s.destroy(), 5000);
    });
    // Answered and closed well before the test's own 5 s limit.
    expect(r).toStartWith("HTTP/1.1 408");
    expect(r).toContain("svc-proxy: request not received within 300 ms");
  });

  test("read timeout on the full path of a server listener: header lines trickled in get a 408", async () => {
    const { serverPort } = await pair({
      server: { middlewares: [{ type: "dummy" }], timeouts: { read: "300ms", idle: "60s" } },
    });
    // The idle timeout (60 s) is far past the helper's bound.
    const r = await tlsUntilClose(serverPort, (s) => {
      s.write("GET / HTTP/1.1\r\nHost: x\r\n");
      const drip = setInterval(() => s.write("X-Slow: a\r\n"), 100);
      return () => clearInterval(drip);
    });
    expect(r).toStartWith("HTTP/1.1 408");
    expect(r).toContain("svc-proxy: request not received within 300 ms");
  });

  test("read timeout on the full path: the rest of a body answered early is no new head (no 408 of its own)", async () => {
    // openai answers a GET of another path at once (403), before the body has come.
    const { serverPort } = await pair({
      server: { middlewares: [{ type: "openai" }], timeouts: { read: "300ms", idle: "1s" } },
    });
    // Closed by the idle timeout (1 s); a 408 would come at 300 ms. The rest of the body follows the answer.
    const got = await tlsUntilClose(
      serverPort,
      (s) => {
        s.write("GET /other HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345");
      },
      (s, first) => {
        if (first) s.write("67890");
      },
    );
    expect(got).toStartWith("HTTP/1.1 403");
    expect(got).not.toContain("408");
  });

  test("idle timeout: an idle keep-alive connection is closed", async () => {
    const port = await plainProxy({ idle: "300ms" });
    const outcome = await new Promise<string>((resolve) => {
      const s = connect(port, "127.0.0.1", () => s.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
      let answered = false;
      s.on("data", () => {
        answered = true;
      });
      s.on("close", () => resolve(answered ? "answered, then closed" : "closed unanswered"));
      setTimeout(() => {
        resolve("still open");
        s.destroy();
      }, 10_000);
    });
    // Closed by the configured 300 ms idle timeout: the default (120 s) would leave it open past the
    // 10 s guard.
    expect(outcome).toBe("answered, then closed");
  });
});
