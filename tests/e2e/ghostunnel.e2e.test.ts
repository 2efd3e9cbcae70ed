import { afterAll, describe, expect, test } from "bun:test";
import { createServer, type Server, connect as tcpConnect } from "node:net";
import { waitForPort } from "../support/net.ts";
import { BUN, jsonLines, type Proc, stopAll } from "../support/proc.ts";
import { exactId, spawnAsWorkload, useTestbed, workload } from "./support.ts";
import { peers } from "./testbed/peers.ts";
import { freePort } from "./testbed/process.ts";

/**
 * Interop with ghostunnel, an independent SPIFFE-aware TLS proxy, both ways, with SVIDs issued by SPIRE to
 * both sides. Our side is lib/tls (tests/support/mtls-peer.ts), ghostunnel uses go-spiffe.
 */
const testbed = useTestbed();
const servers: Server[] = [];
afterAll(async () => {
  await stopAll();
  for (const s of servers) s.close();
});

const tcpReady = (port: number) => waitForPort(port, 30_000);

/** A plaintext backend that greets then echoes. */
async function backend(): Promise<number> {
  const port = await freePort();
  const server = createServer((s) => {
    s.write("hello from backend\n");
    s.pipe(s);
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(port, "127.0.0.1", () => r()));
  return port;
}

/** Sends one line through a plaintext port and returns the first line received. */
function firstLine(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = tcpConnect(port, "127.0.0.1");
    let got = "";
    s.on("data", (d) => {
      got += d;
      if (got.includes("\n")) {
        s.destroy();
        resolve(got.slice(0, got.indexOf("\n")));
      }
    });
    s.on("error", reject);
    s.on("close", () => resolve(got));
  });
}

/** ghostunnel in server mode as `api`, admitting `allowUri`, in front of a greeting echo backend. */
async function ghostunnelServer(allowUri: string): Promise<number> {
  const [target, listen] = [await backend(), await freePort()];
  ghostunnel(
    ["server", `--listen=127.0.0.1:${listen}`, `--target=127.0.0.1:${target}`, `--allow-uri=${allowUri}`],
    "api",
  );
  await tcpReady(listen);
  return listen;
}

/** ghostunnel in client mode as `web`, verifying `verifyUri`, towards `targetPort`; returns its plaintext port. */
async function ghostunnelClient(targetPort: number, verifyUri: string): Promise<number> {
  const listen = await freePort();
  ghostunnel(
    [
      "client",
      `--listen=127.0.0.1:${listen}`,
      `--target=127.0.0.1:${targetPort}`,
      `--verify-uri=${verifyUri}`,
    ],
    "web",
  );
  await tcpReady(listen);
  return listen;
}

function ghostunnel(args: string[], as: "web" | "api"): Proc {
  const tb = testbed();
  return spawnAsWorkload(tb, workload(tb, as), [
    peers().ghostunnel,
    ...args,
    `--use-workload-api-addr=unix://${tb.spire.agentSocket}`,
  ]);
}

async function ourServer(as: "web" | "api", allow: string[]): Promise<{ proc: Proc; port: number }> {
  const tb = testbed();
  const proc = spawnAsWorkload(tb, workload(tb, as), [
    BUN,
    "tests/support/mtls-peer.ts",
    "server",
    ...allow.flatMap((a) => ["--allow", a]),
  ]);
  return { proc, port: JSON.parse(await proc.waitFor((l) => l.includes('"listening"'), 60_000)).listening };
}

async function ourClient(as: "web" | "api", port: number, allow: string[]) {
  const tb = testbed();
  const proc = spawnAsWorkload(tb, workload(tb, as), [
    BUN,
    "tests/support/mtls-peer.ts",
    "client",
    "--port",
    String(port),
    ...allow.flatMap((a) => ["--allow", a]),
  ]);
  return JSON.parse(await proc.waitFor((l) => l.includes('"result"'), 60_000)).result;
}

describe("ghostunnel client → our mTLS server", () => {
  test("ghostunnel presents web's SVID; our server authenticates it and ghostunnel verifies ours", async () => {
    const tb = testbed();
    const web = workload(tb, "web");
    const api = workload(tb, "api");
    const ours = await ourServer("api", [exactId(web.spiffeId)]);
    const listen = await ghostunnelClient(ours.port, api.spiffeId);
    expect(await firstLine(listen)).toMatch(new RegExp(`^hello ${web.spiffeId} `));
    // Every connection ghostunnel made (the readiness probe's too) came in as web.
    expect(new Set(jsonLines(ours.proc, "accepted").map((l) => l.accepted))).toEqual(new Set([web.spiffeId]));
  }, 90_000);

  test("our server refuses ghostunnel's identity when it matches no pattern, and logs why", async () => {
    const tb = testbed();
    const web = workload(tb, "web");
    const api = workload(tb, "api");
    const ours = await ourServer("api", [exactId(api.spiffeId)]);
    const listen = await ghostunnelClient(ours.port, api.spiffeId);
    expect(await firstLine(listen)).toBe("");
    const rejected = JSON.parse(await ours.proc.waitFor((l) => l.includes('"rejected"'), 30_000));
    expect(rejected.code).toBe("unauthorized_peer");
    expect(rejected.rejected).toStartWith(`peer ${web.spiffeId} matches none of 1 allowed pattern(s)`);
  }, 90_000);
});

describe("our mTLS client → ghostunnel server", () => {
  test("our client verifies ghostunnel's SVID; ghostunnel admits our SVID by URI", async () => {
    const tb = testbed();
    const web = workload(tb, "web");
    const api = workload(tb, "api");
    const listen = await ghostunnelServer(web.spiffeId);
    const r = await ourClient("web", listen, [exactId(api.spiffeId)]);
    expect(r).toMatchObject({ ok: 1, failed: 0, serverIds: [api.spiffeId] });
  }, 90_000);

  test("ghostunnel refuses our client when its URI is not allowed", async () => {
    const tb = testbed();
    const api = workload(tb, "api");
    const listen = await ghostunnelServer(api.spiffeId);
    const r = await ourClient("web", listen, []);
    expect(r.ok).toBe(0);
    expect(r.failed).toBe(1);
  }, 90_000);

  test("our client refuses ghostunnel's server when its ID matches none of our patterns", async () => {
    const tb = testbed();
    const web = workload(tb, "web");
    const listen = await ghostunnelServer(web.spiffeId);
    const r = await ourClient("web", listen, ["^spiffe://svc\\.test/ns/alpha/sa/db/.*$"]);
    expect(r.ok).toBe(0);
    expect(r.errors[0]).toMatch(
      /^peer spiffe:\/\/svc\.test\/ns\/alpha\/sa\/api\/pod\/api-0\/\S+ matches none of 1 allowed pattern/,
    );
  }, 90_000);
});
