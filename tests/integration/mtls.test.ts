import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { type DevApi, startDevApi, tempDir } from "../support/dev-api.ts";
import { BUN, jsonLines, type Proc, spawnProc, stopAll } from "../support/proc.ts";

/**
 * Two processes doing SPIFFE mTLS with SVIDs from the development Workload API, each from its own
 * socket (as two workloads would get them from a SPIRE agent).
 */
const dir = tempDir();
const caDir = join(dir, "ca-example.org");
let web: DevApi;
let api: DevApi;
let foreign: DevApi;
let federated: DevApi;

beforeAll(async () => {
  // example.org first: its CA directory must exist before another server federates with it.
  [web, api] = await Promise.all([
    startDevApi({
      socketPath: join(dir, "web.sock"),
      spiffeIds: ["spiffe://example.org/ns/prod/sa/web"],
      caDir,
    }),
    startDevApi({
      socketPath: join(dir, "api.sock"),
      spiffeIds: ["spiffe://example.org/ns/prod/sa/api"],
      caDir,
    }),
  ]);
  [foreign, federated] = await Promise.all([
    startDevApi({
      socketPath: join(dir, "foreign.sock"),
      spiffeIds: ["spiffe://other.org/ns/prod/sa/web"],
      caDir: join(dir, "ca-other.org"),
    }),
    // Same identity and CA as `foreign`, but it also trusts example.org, so it completes its side.
    startDevApi({
      socketPath: join(dir, "federated.sock"),
      spiffeIds: ["spiffe://other.org/ns/prod/sa/web"],
      caDir: join(dir, "ca-other.org"),
      federate: [caDir],
    }),
  ]);
});
afterAll(stopAll);

async function server(
  socket: string,
  allow: string[] = [],
  extra: string[] = [],
): Promise<{ proc: Proc; port: number }> {
  const proc = spawnProc([
    BUN,
    "tests/support/mtls-peer.ts",
    "server",
    "--socket",
    socket,
    ...allow.flatMap((a) => ["--allow", a]),
    ...extra,
  ]);
  const line = await proc.waitFor((l) => l.includes('"listening"'));
  return { proc, port: JSON.parse(line).listening };
}

interface ClientResult {
  ok: number;
  failed: number;
  errors: string[];
  serverIds: string[];
  serverSerials: number;
  clientSerials: number;
  heldOk: number;
}

async function client(
  socket: string,
  port: number,
  allow: string[] = [],
  extra: string[] = [],
): Promise<ClientResult> {
  const proc = spawnProc([
    BUN,
    "tests/support/mtls-peer.ts",
    "client",
    "--socket",
    socket,
    "--port",
    String(port),
    ...allow.flatMap((a) => ["--allow", a]),
    ...extra,
  ]);
  const line = await proc.waitFor((l) => l.includes('"result"'), 60_000);
  return JSON.parse(line).result;
}

describe("SPIFFE mTLS between two processes", () => {
  test("authenticated both ways; each side sees the other's SPIFFE ID", async () => {
    const s = await server(api.socket, ["^spiffe://example\\.org/ns/prod/sa/web$"]);
    const r = await client(web.socket, s.port, ["^spiffe://example\\.org/ns/prod/sa/api$"], ["--count", "5"]);
    expect(r).toMatchObject({ ok: 5, failed: 0, serverIds: ["spiffe://example.org/ns/prod/sa/api"] });
    expect(jsonLines(s.proc, "accepted").map((l) => l.accepted)).toEqual(
      Array(5).fill("spiffe://example.org/ns/prod/sa/web"),
    );
    await s.proc.stop();
  });

  test("a client without the server's trust domain bundle refuses the server", async () => {
    const s = await server(api.socket);
    const r = await client(foreign.socket, s.port);
    expect(r.ok).toBe(0);
    expect(r.errors).toEqual([
      'no trust bundle for trust domain "example.org" of peer spiffe://example.org/ns/prod/sa/api',
    ]);
    await s.proc.stop();
  });

  test("a server refuses a client from a trust domain it has no bundle for, even a client that trusts it", async () => {
    const s = await server(api.socket);
    const r = await client(federated.socket, s.port);
    expect(r.ok).toBe(0);
    expect(r.serverIds).toEqual(["spiffe://example.org/ns/prod/sa/api"]);
    const rejected = await s.proc.waitFor((l) => l.includes('"rejected"'));
    expect(JSON.parse(rejected)).toEqual({
      rejected: 'no trust bundle for trust domain "other.org" of peer spiffe://other.org/ns/prod/sa/web',
      code: "untrusted_peer",
    });
    await s.proc.stop();
  });

  test("a peer that matches no pattern is refused, with the reason in the server's log", async () => {
    const s = await server(api.socket, ["^spiffe://example\\.org/ns/prod/sa/admin$"]);
    const r = await client(web.socket, s.port);
    expect(r.ok).toBe(0);
    expect(r.failed).toBe(1);
    const rejected = JSON.parse(await s.proc.waitFor((l) => l.includes('"rejected"')));
    expect(rejected).toEqual({
      rejected:
        'peer spiffe://example.org/ns/prod/sa/web matches none of 1 allowed pattern(s) ["^spiffe://example\\\\.org/ns/prod/sa/admin$"]',
      code: "unauthorized_peer",
    });
    expect(jsonLines(s.proc, "accepted")).toEqual([]);
    await s.proc.stop();
  });

  test("the client refuses a server whose ID matches none of its patterns, before sending data", async () => {
    const s = await server(api.socket);
    const r = await client(web.socket, s.port, ["^spiffe://example\\.org/ns/prod/sa/db$"]);
    expect(r.errors).toEqual([
      'peer spiffe://example.org/ns/prod/sa/api matches none of 1 allowed pattern(s) ["^spiffe://example\\\\.org/ns/prod/sa/db$"]',
    ]);
    await s.proc.stop();
  });

  test("TLS session keys are logged in the NSS key log format", async () => {
    const keylog = join(dir, "keys.log");
    const s = await server(api.socket, [], ["--keylog", keylog]);
    const r = await client(web.socket, s.port, [], ["--count", "2"]);
    expect(r.ok).toBe(2);
    await s.proc.stop();
    const lines = readFileSync(keylog, "utf8").trim().split("\n");
    // TLS 1.3: five secrets per connection, each "<LABEL> <client_random hex 64> <secret hex>".
    expect(lines).toHaveLength(10);
    for (const l of lines) {
      expect(l).toMatch(
        /^(CLIENT_HANDSHAKE_TRAFFIC_SECRET|SERVER_HANDSHAKE_TRAFFIC_SECRET|CLIENT_TRAFFIC_SECRET_0|SERVER_TRAFFIC_SECRET_0|EXPORTER_SECRET) [0-9a-f]{64} [0-9a-f]{64,96}$/,
      );
    }
    expect(new Set(lines.map((l) => l.split(" ")[1])).size).toBe(2);
  });
});

describe("SVID rotation", () => {
  test("rotation during a run of connections fails none, and an established connection survives it", async () => {
    const td = tempDir();
    // 3 s SVIDs rotate every 1.5 s on both sides while connections keep being made.
    const [rweb, rapi] = await Promise.all([
      startDevApi({
        socketPath: join(td, "web.sock"),
        spiffeIds: ["spiffe://example.org/ns/prod/sa/web"],
        caDir,
        ttl: "3s",
      }),
      startDevApi({
        socketPath: join(td, "api.sock"),
        spiffeIds: ["spiffe://example.org/ns/prod/sa/api"],
        caDir,
        ttl: "3s",
      }),
    ]);
    const s = await server(rapi.socket);
    const r = await client(rweb.socket, s.port, [], ["--count", "80", "--interval", "60", "--hold"]);
    expect(r.errors).toEqual([]);
    expect(r.ok).toBe(80);
    expect(r.heldOk).toBe(80);
    // Both sides presented more than one certificate during the run: rotation happened under load.
    expect(r.serverSerials).toBeGreaterThan(1);
    expect(r.clientSerials).toBeGreaterThan(1);
    await Promise.all([s.proc.stop(), rweb.proc.stop(), rapi.proc.stop()]);
  }, 90_000);
});
