import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createServer, type Server } from "node:http";
import { connect, createServer as createTcpServer, type Socket } from "node:net";
import { type DevApi, prodId as ID, onlyProd as only, startProdApis, tempDir } from "../support/dev-api.ts";
import { freePort } from "../support/net.ts";
import { BUN, spawnProc, stopAll } from "../support/proc.ts";
import { logLines, startSvcProxy, waitForLog } from "../support/proxy.ts";
import { waitUntil } from "../support/wait.ts";

/**
 * The relay path of HTTP listeners (no middlewares) on the wire, with raw sockets: what the upstream
 * receives (raw header lines, as sent), pipelining, framing refusals, and the read timeout on heads.
 * Real svc-proxy processes; SVIDs from the development Workload API.
 */
const dir = tempDir();
const apis: Record<string, DevApi> = {};
let upstream: Server;
let upstreamPort: number;
/** Connections the upstream accepted. */
let upstreamConnections = 0;
/** Every request the upstream received: method, url and raw header lines. */
const seen: { method: string; url: string; raw: string[] }[] = [];

beforeAll(async () => {
  Object.assign(apis, await startProdApis(dir, ["web", "api"]));
  upstreamPort = await freePort();
  upstream = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      seen.push({ method: req.method ?? "", url: req.url ?? "", raw: req.rawHeaders });
      if (req.url === "/parts") {
        // A body in two writes without a length: sent chunked.
        res.writeHead(200, { "content-type": "text/plain" });
        res.write("part1-");
        res.end("part2");
        return;
      }
      const body = JSON.stringify({ url: req.url, raw: req.rawHeaders });
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
      res.end(body);
    });
  });
  upstream.on("connection", () => upstreamConnections++);
  await new Promise<void>((r) => upstream.listen(upstreamPort, "127.0.0.1", () => r()));
});
afterAll(async () => {
  await stopAll();
  upstream.close();
});

const proxyConfig = (sa: string, listener: Record<string, unknown>) => ({
  spiffe: { workload_socket_path: apis[sa]?.socket },
  metricsAddr: "0",
  listeners: [{ name: "l", ...listener }],
});

/** A client-mode relay in front of the plaintext upstream. */
async function plainRelay(extra: Record<string, unknown> = {}): Promise<number> {
  const port = await freePort();
  await startSvcProxy(
    proxyConfig("web", {
      address: `127.0.0.1:${port}`,
      mode: "client",
      target: { url: `http://127.0.0.1:${upstreamPort}` },
      ...extra,
    }),
  );
  return port;
}

/** A client relay → server relay pair; returns the client's port. */
async function relayPair(): Promise<number> {
  const [serverPort, clientPort] = [await freePort(), await freePort()];
  await startSvcProxy(
    proxyConfig("api", {
      address: `127.0.0.1:${serverPort}`,
      mode: "server",
      target: { url: `http://127.0.0.1:${upstreamPort}` },
      source: { spiffe_ids: only("web") },
    }),
  );
  await startSvcProxy(
    proxyConfig("web", {
      address: `127.0.0.1:${clientPort}`,
      mode: "client",
      target: { url: `https://127.0.0.1:${serverPort}`, spiffe_ids: only("api") },
    }),
  );
  return clientPort;
}

/** Writes `bytes` and collects everything until the proxy closes the connection (or 10 s pass). */
function exchange(port: number, bytes: string, keepOpen = false): Promise<string> {
  return new Promise((resolve) => {
    let got = "";
    const s: Socket = connect(port, "127.0.0.1", () => s.write(bytes));
    s.on("data", (d: Buffer) => {
      got += d.toString("latin1");
    });
    s.on("error", () => {});
    s.on("close", () => resolve(got));
    const timer = setTimeout(() => s.destroy(), 10_000);
    s.on("close", () => clearTimeout(timer));
    if (keepOpen) s.on("end", () => s.end());
  });
}

const statuses = (wire: string) => [...wire.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
const bodies = (wire: string) =>
  [...wire.matchAll(/\r\n\r\n(\{.*?\})(?=HTTP\/1\.1|$)/gs)].map((m) => JSON.parse(m[1] as string));
const ok = (body: string) => `HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n\r\n${body}`;

/** A target on raw sockets: `answer` writes the bytes for each request head (its path, its connection's number). */
async function rawTarget(answer: (path: string, connection: number) => string) {
  let connections = 0;
  const server = createTcpServer((s) => {
    const n = ++connections;
    let head = "";
    s.on("data", (d: Buffer) => {
      head += d.toString("latin1");
      if (!head.includes("\r\n\r\n")) return;
      const path = head.split(" ")[1] ?? "";
      head = "";
      s.write(answer(path, n));
    });
    s.on("error", () => {});
  });
  const port = await freePort();
  await new Promise<void>((r) => server.listen(port, "127.0.0.1", () => r()));
  return { port, close: () => server.close() };
}

/** Raw header lines as [name, value] pairs, names lower case. */
const pairs = (raw: string[]) => raw.flatMap((v, i) => (i % 2 === 0 ? [[v.toLowerCase(), raw[i + 1]]] : []));

describe("refused callers", () => {
  test("a TLS caller without a certificate is logged and counted under the same reason, handshake", async () => {
    const [port, metrics] = [await freePort(), await freePort()];
    const server = await startSvcProxy({
      ...proxyConfig("api", {
        address: `127.0.0.1:${port}`,
        mode: "server",
        target: { url: `http://127.0.0.1:${upstreamPort}` },
        source: { spiffe_ids: only("web") },
      }),
      metricsAddr: `127.0.0.1:${metrics}`,
    });
    const tls = await import("node:tls");
    await new Promise<void>((resolve) => {
      const s = tls.connect({ host: "127.0.0.1", port, rejectUnauthorized: false }, () =>
        s.write("GET / HTTP/1.1\r\nhost: x\r\n\r\n"),
      );
      s.on("error", () => resolve());
      s.on("close", () => resolve());
    });
    const refusal = await waitForLog(server, "caller refused");
    expect(refusal).toMatchObject({ level: "warn", code: "handshake" });
    expect(String(refusal?.reason)).toStartWith("TLS handshake failed");
    const text = await (await fetch(`http://127.0.0.1:${metrics}/metrics`)).text();
    expect(text).toMatch(/svc_proxy_denied_total\{[^}]*reason="handshake"[^}]*\} 1/);
  });
});

describe("headers the proxy adds", () => {
  test("a Connection header cannot remove Svc-Peer-ID, X-Request-Id or X-Forwarded-For; the upstream sees exactly one Svc-Peer-ID, the caller's", async () => {
    const port = await relayPair();
    const wire = await exchange(
      port,
      "GET /conn HTTP/1.1\r\nHost: x\r\nSvc-Peer-ID: spiffe://example.org/forged\r\nsvc-peer-id: spiffe://evil/x\r\nSvc_Peer_ID: spiffe://evil/u\r\nsvc-peer_id: spiffe://evil/v\r\nConnection: close, Svc-Peer-ID, X-Request-Id, X-Forwarded-For\r\n\r\n",
    );
    expect(statuses(wire)).toEqual([200]);
    const headers = pairs(bodies(wire)[0].raw);
    // The client proxy's own Svc-Peer-ID (none: client mode) and the server proxy's, the caller's ID; no
    // spelling with underscores, which CGI and WSGI targets would read as the same field.
    expect(headers.filter(([n]) => String(n).replaceAll("_", "-") === "svc-peer-id")).toEqual([
      ["svc-peer-id", ID("web")],
    ]);
    expect(headers.filter(([n]) => n === "x-request-id")).toHaveLength(1);
    expect(headers.filter(([n]) => n === "x-forwarded-for")).toHaveLength(1);
    expect(headers.some(([n]) => n === "connection" && /svc-peer-id/i.test(String(headers)))).toBe(false);
  });

  test("hop-by-hop fields and the fields Connection names are not forwarded; end-to-end ones are, once", async () => {
    const port = await plainRelay();
    const wire = await exchange(
      port,
      "GET /hop HTTP/1.1\r\nHost: x\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\nX-Secret: 1\r\nConnection: close, X-Secret\r\nX-Kept: a\r\nX-Kept: b\r\n\r\n",
    );
    const headers = pairs(bodies(wire)[0].raw).map(([n]) => n);
    for (const gone of ["keep-alive", "te", "x-secret", "connection"]) expect(headers).not.toContain(gone);
    expect(headers.filter((n) => n === "x-kept")).toHaveLength(2);
  });
});

describe("pipelining and framing", () => {
  test("pipelined requests are answered in order; a Connection: close one is the last answered", async () => {
    const port = await plainRelay();
    const before = seen.length;
    const wire = await exchange(
      port,
      "GET /p1 HTTP/1.1\r\nHost: x\r\n\r\nPOST /p2 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET /p3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /p4 HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    expect(statuses(wire)).toEqual([200, 200, 200]);
    expect(bodies(wire).map((b) => b.url)).toEqual(["/p1", "/p2", "/p3"]);
    expect(wire).toContain("connection: close");
    expect(seen.slice(before).map((r) => r.url)).toEqual(["/p1", "/p2", "/p3"]);
  });

  test("requests before a malformed one are answered, then a 400, and nothing after it is forwarded", async () => {
    const port = await plainRelay();
    const before = seen.length;
    const wire = await exchange(
      port,
      "GET /m1 HTTP/1.1\r\nHost: x\r\n\r\nGET /m2 HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\nGET /m3 HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    expect(statuses(wire)).toEqual([200, 400]);
    expect(wire).toContain("svc-proxy: invalid header line");
    expect(seen.slice(before).map((r) => r.url)).toEqual(["/m1"]);
  });

  test.each([
    ["gzip, chunked", 501],
    ["chunked, gzip", 501],
    ["identity", 501],
    ["chunked\r\nTransfer-Encoding: chunked", 501],
  ])("Transfer-Encoding %p gets %p and is not forwarded", async (te, status) => {
    const port = await plainRelay();
    const before = seen.length;
    const wire = await exchange(
      port,
      `POST /te HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: ${te}\r\n\r\n0\r\n\r\n`,
    );
    expect(statuses(wire)).toEqual([status]);
    expect(seen.length).toBe(before);
  });

  test.each([
    [
      "Content-Length and Transfer-Encoding (CL.TE smuggling)",
      "Content-Length: 6\r\nTransfer-Encoding: chunked",
    ],
    ["two different Content-Lengths", "Content-Length: 6\r\nContent-Length: 7"],
    ["a space before the colon", "Content-Length : 6"],
    ["a NUL in a value", "X-A: a\u0000b\r\nContent-Length: 6"],
    ["obsolete line folding", "X-A: a\r\n b\r\nContent-Length: 6"],
  ])("%s: 400, and the smuggled request after it is never forwarded", async (_name, fields) => {
    const port = await plainRelay();
    const before = seen.length;
    const wire = await exchange(
      port,
      `POST /s1 HTTP/1.1\r\nHost: x\r\n${fields}\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n`,
    );
    expect(statuses(wire)).toEqual([400]);
    expect(seen.slice(before).map((r) => r.url)).not.toContain("/smuggled");
    expect(seen.length).toBe(before);
  });

  test("a chunked request body is forwarded whole, re-framed; a CONNECT is refused with 501", async () => {
    const port = await plainRelay();
    const wire = await exchange(
      port,
      "POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\nCONNECT example.org:443 HTTP/1.1\r\nHost: example.org\r\n\r\n",
    );
    expect(statuses(wire)).toEqual([200, 501]);
    const headers = pairs(bodies(wire)[0].raw);
    expect(headers).toContainEqual(["transfer-encoding", "chunked"]);
  });

  test("pipelined requests are carried over one upstream connection, reused from the pool", async () => {
    const port = await plainRelay();
    const before = upstreamConnections;
    const wire = await exchange(
      port,
      `${"GET /p HTTP/1.1\r\nHost: x\r\n\r\n".repeat(4)}GET /p HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`,
    );
    expect(statuses(wire)).toEqual([200, 200, 200, 200, 200]);
    expect(upstreamConnections - before).toBe(1);
  });

  test("bytes a target sends after its response do not become the next caller's answer", async () => {
    // On /extra the response is followed, in the same write, by bytes nobody asked for.
    const target = await rawTarget((path, n) => {
      if (path !== "/extra") return ok(`normal on connection ${n}`);
      return `${ok("first")}\r\n${ok("forged")}`;
    });
    try {
      const port = await plainRelay({ target: { url: `http://127.0.0.1:${target.port}` } });
      const first = await exchange(port, "GET /extra HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
      expect(first).toEndWith("\r\n\r\nfirst");
      const next = await exchange(port, "GET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
      expect(next).toStartWith("HTTP/1.1 200");
      expect(next).toEndWith("\r\n\r\nnormal on connection 2");
    } finally {
      target.close();
    }
  });

  test("a HEAD answer's Content-Length is passed on when the proxy can read it, dropped when it cannot, on either road", async () => {
    // As received (nothing to remove), or rebuilt (a Keep-Alive field to remove). Over 15 digits: no
    // length the proxy reads, dropped on both roads, not passed on by one and dropped by the other.
    const target = await rawTarget((path) => {
      const length = path.includes("long") ? "1234567890123456" : "5";
      const extra = path.includes("rebuilt") ? "Keep-Alive: timeout=5\r\n" : "";
      return `HTTP/1.1 200 OK\r\nContent-Length: ${length}\r\n${extra}\r\n`;
    });
    try {
      const port = await plainRelay({ target: { url: `http://127.0.0.1:${target.port}` } });
      for (const path of ["/short", "/short-rebuilt", "/long", "/long-rebuilt"]) {
        const head = await exchange(port, `HEAD ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
        expect(head).toStartWith("HTTP/1.1 200");
        const declared = /\r\ncontent-length: *(\d+)/i.exec(head)?.[1];
        expect({ path, declared }).toEqual({ path, declared: path.includes("long") ? undefined : "5" });
      }
    } finally {
      target.close();
    }
  });

  test("a 101 nobody asked for is a 502 to the caller, and the next caller is served", async () => {
    const target = await rawTarget((path, n) =>
      path === "/switch"
        ? "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n"
        : ok(`normal on connection ${n}`),
    );
    try {
      const port = await plainRelay({ target: { url: `http://127.0.0.1:${target.port}` } });
      const switched = await exchange(port, "GET /switch HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
      expect(switched).toStartWith("HTTP/1.1 502");
      expect(switched).toContain("the upstream switched protocols");
      const next = await exchange(port, "GET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
      expect(next).toEndWith("\r\n\r\nnormal on connection 2");
    } finally {
      target.close();
    }
  });

  test("a chunked response goes to an HTTP/1.0 caller unchunked, to the close; an HTTP/1.1 caller gets it chunked", async () => {
    const port = await plainRelay();
    const old = await exchange(port, "GET /parts HTTP/1.0\r\nHost: x\r\n\r\n");
    expect(old).toStartWith("HTTP/1.1 200");
    expect(old.toLowerCase()).not.toContain("transfer-encoding");
    expect(old.toLowerCase()).toContain("connection: close");
    expect(old).toEndWith("\r\n\r\npart1-part2");
    const current = await exchange(port, "GET /parts HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    expect(current.toLowerCase()).toContain("transfer-encoding: chunked");
    // Chunk sizes follow the reads the relay made: only the framing and the decoded body are fixed.
    const chunked = current.slice(current.indexOf("\r\n\r\n") + 4);
    expect(chunked).toEndWith("0\r\n\r\n");
    expect(chunked.replace(/[0-9a-f]+\r\n(.*?)\r\n/gs, "$1")).toBe("part1-part2");
  });
});

describe("timeouts on the relay", () => {
  test("timeouts.read covers the head: a caller trickling header lines gets a 408 when it runs out, not after idle", async () => {
    const port = await plainRelay({ timeouts: { read: "400ms", idle: "60s" } });
    const s = connect(port, "127.0.0.1");
    let got = "";
    s.on("data", (d: Buffer) => {
      got += d.toString("latin1");
    });
    const closed = new Promise<void>((resolve) => s.on("close", () => resolve()));
    s.write("GET /slow-head HTTP/1.1\r\n");
    // One header line at a time, each well within the read timeout but never ending the head.
    const trickle = setInterval(() => {
      if (!s.destroyed) s.write("X-Trickle: 1\r\n");
    }, 100);
    await closed;
    clearInterval(trickle);
    expect(got).toStartWith("HTTP/1.1 408");
    expect(got).toContain("svc-proxy: request not received within 400 ms");
  });

  test("an unreachable target is a 502 with a log line, and the proxy keeps serving", async () => {
    const deadPort = await freePort();
    const port = await freePort();
    const proxy = await startSvcProxy(
      proxyConfig("web", {
        address: `127.0.0.1:${port}`,
        mode: "client",
        target: { url: `http://127.0.0.1:${deadPort}` },
      }),
    );
    for (let i = 0; i < 3; i++) {
      const wire = await exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
      expect(statuses(wire)).toEqual([502]);
      expect(wire).toContain(`svc-proxy: upstream http://127.0.0.1:${deadPort} unreachable (ECONNREFUSED)`);
    }
    await waitUntil(
      "three upstream failures logged",
      () => logLines(proxy).filter((l) => l.msg === "upstream failure").length === 3,
    );
    expect(proxy.proc.exitCode).toBeNull();
  });
});

describe("file descriptors running out", () => {
  // The relay and the full path (a middleware): the full path spun a core once accepting failed. TCP and
  // MQTT listeners take the same guard as the full path (proxy/fd-budget.ts guardDescriptors).
  test.each([
    ["the relay", {}],
    ["the full path", { middlewares: [{ type: "dummy" }] }],
  ] as [string, Record<string, unknown>][])(
    "past the descriptor budget %s closes new callers at once and logs it; established callers keep being served, and new ones are served again once some leave",
    async (_kind, extra) => {
      const port = await freePort();
      const config = proxyConfig("web", {
        address: `127.0.0.1:${port}`,
        mode: "client",
        target: { url: `http://127.0.0.1:${upstreamPort}` },
        ...extra,
      });
      const proxy = spawnProc(["prlimit", "--nofile=100", "--", BUN, "cmd/svc-proxy.ts"], {
        SVC_PROXY_CONFIG: JSON.stringify(config),
      });
      await waitUntil("the proxy listens", () => proxy.stderr().includes('"msg":"listening"'));
      // Resolves once connected, or once closed: a caller the proxy refuses may be reset before it sees
      // its connect.
      const open = (): Promise<Socket> =>
        new Promise((resolve) => {
          const s = connect(port, "127.0.0.1", () => resolve(s));
          s.on("error", () => {});
          s.on("close", () => resolve(s));
        });
      /** The status line of one request on `s`, or "closed" if the proxy closes it without an answer. */
      const ask = (s: Socket): Promise<string> =>
        new Promise((resolve) => {
          let got = "";
          s.on("data", (d: Buffer) => {
            got += d.toString("latin1");
            if (got.includes("\r\n\r\n")) resolve(got.split("\r\n")[0] as string);
          });
          s.on("close", () => resolve(got ? (got.split("\r\n")[0] as string) : "closed"));
          // The proxy may have closed it already, between the connect and now.
          if (s.destroyed || s.readableEnded) resolve("closed");
          else s.write("GET /fd HTTP/1.1\r\nHost: x\r\n\r\n");
        });
      const first = await open();
      expect(await ask(first)).toBe("HTTP/1.1 200 OK");
      const many = await Promise.all(Array.from({ length: 80 }, open));
      const answers = await Promise.all(many.map(ask));
      expect(answers.filter((a) => a === "HTTP/1.1 200 OK").length).toBeGreaterThan(10);
      expect(answers.filter((a) => a === "closed").length).toBeGreaterThan(0);
      expect(answers.every((a) => a === "HTTP/1.1 200 OK" || a === "closed")).toBe(true);
      await waitUntil("the refusals logged", () =>
        proxy.stderr().includes("file descriptors nearly exhausted"),
      );
      expect(await ask(first)).toBe("HTTP/1.1 200 OK");
      for (const s of many) s.destroy();
      await waitUntil(
        "a new caller served again",
        async () => (await ask(await open())) === "HTTP/1.1 200 OK",
      );
      first.destroy();
    },
    30_000,
  );
});
