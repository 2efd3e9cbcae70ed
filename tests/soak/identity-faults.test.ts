import { afterAll, describe, expect, test } from "bun:test";
import { createServer, type Server } from "node:http";
import { join } from "node:path";
import { type DevApi, prodId as ID, onlyProd as only, startDevApi, tempDir } from "../support/dev-api.ts";
import { freePort } from "../support/net.ts";
import { type Proc, stopAll } from "../support/proc.ts";
import { logLines, startSvcProxy } from "../support/proxy.ts";
import { waitUntil } from "../support/wait.ts";

/**
 * `make soak`: identity faults under HTTP load through a client→server proxy pair (relay path), with
 * every request counted.
 * - Ten SVID rotations of both proxies: no request fails.
 * - The client proxy's Workload API stopped for 40 s and started again: no request fails on the
 *   connections in use, and the new SVID is taken within 2 s of the API's return.
 */
const dir = tempDir("svc-soak-");
const caDir = join(dir, "ca");
let upstream: Server;

afterAll(async () => {
  upstream?.close();
  await stopAll();
});

async function pair(ttl: string): Promise<{ web: DevApi; client: Proc; server: Proc; port: number }> {
  upstream ??= await new Promise<Server>((resolve) => {
    const s = createServer((_req, res) => res.end("ok"));
    s.listen(0, "127.0.0.1", () => resolve(s));
  });
  const upstreamPort = (upstream.address() as { port: number }).port;
  const tag = crypto.randomUUID().slice(0, 8);
  const [web, api] = await Promise.all(
    ["web", "api"].map((sa) =>
      startDevApi({ socketPath: join(dir, `${sa}-${tag}.sock`), spiffeIds: [ID(sa)], caDir, ttl }),
    ),
  );
  const [serverPort, port] = [await freePort(), await freePort()];
  const server = await startSvcProxy({
    spiffe: { workload_socket_path: api?.socket },
    metricsAddr: "0",
    listeners: [
      {
        name: "in",
        address: `127.0.0.1:${serverPort}`,
        mode: "server",
        target: { url: `http://127.0.0.1:${upstreamPort}` },
        source: { spiffe_ids: only("web") },
      },
    ],
  });
  const client = await startSvcProxy({
    spiffe: { workload_socket_path: web?.socket },
    metricsAddr: "0",
    listeners: [
      {
        name: "out",
        address: `127.0.0.1:${port}`,
        mode: "client",
        target: { url: `https://127.0.0.1:${serverPort}`, spiffe_ids: only("api") },
      },
    ],
  });
  return { web: web as DevApi, client, server, port };
}

/** Eight keep-alive callers sending GET and POST until `done()` says stop; every status is kept. */
function load(port: number, done: () => boolean): { statuses: number[]; finished: Promise<number[]> } {
  const statuses: number[] = [];
  const one = (i: number) =>
    fetch(`http://127.0.0.1:${port}/soak`, {
      method: i % 2 ? "POST" : "GET",
      ...(i % 2 ? { body: "x".repeat(100) } : {}),
    })
      .then(async (r) => {
        await r.arrayBuffer();
        return r.status;
      })
      .catch(() => 0);
  const finished = Promise.all(
    Array.from({ length: 8 }, async (_, w) => {
      for (let i = w; !done() && statuses.length < 2_000_000; i++) statuses.push(await one(i));
    }),
  ).then(() => statuses);
  return { statuses, finished };
}

const rotations = (p: Proc) => logLines(p).filter((l) => l.msg === "SVID rotated").length;

describe("identity faults under load", () => {
  test("ten SVID rotations of both proxies: no request fails", async () => {
    // Rotation every 5 s (the development API rotates at half-life). This run found pooled upstream
    // connections that were busy at a rotation going back to the pool and being used after the old
    // SVID expired (ECONNRESET at the expiry second); they are retired now.
    const { client, server, port } = await pair("10s");
    const statuses = await load(port, () => rotations(client) >= 10 && rotations(server) >= 10).finished;
    expect(statuses.length).toBeGreaterThan(100);
    const failed = statuses.filter((s) => s !== 200);
    if (failed.length) {
      // What went wrong, for whoever reads a red run.
      const reasons = (p: Proc) =>
        logLines(p)
          .filter((l) => l.level !== "info")
          .slice(0, 5);
      console.log("client:", reasons(client), "server:", reasons(server));
    }
    expect(failed).toEqual([]);
  }, 180_000);

  test("the Workload API away for 40 s: no request fails, and its return brings a new SVID within 2 s", async () => {
    const p = await pair("1h");
    let done = false;
    const running = load(p.port, () => done);
    await waitUntil("requests flowing", () => running.statuses.length > 100, 10_000);
    await p.web.proc.stop();
    await waitUntil(
      "the outage noticed",
      () => logLines(p.client).some((l) => l.msg === "Workload API unavailable; serving with the last SVID"),
      10_000,
    );
    // The outage itself is the thing under test: 40 s without the Workload API.
    await Bun.sleep(40_000);
    const before = rotations(p.client);
    p.web = await startDevApi({
      socketPath: p.web.socket.replace(/^unix:\/\//, ""),
      spiffeIds: [ID("web")],
      caDir,
      ttl: "1h",
    });
    // From the moment the API serves again (startDevApi waits for it).
    const returned = Date.now();
    await waitUntil("the new SVID", () => rotations(p.client) > before, 30_000);
    const took = Date.now() - returned;
    const sent = running.statuses.length;
    await waitUntil("requests after the return", () => running.statuses.length > sent + 100, 10_000);
    done = true;
    const statuses = await running.finished;
    console.log(`soak: new SVID ${took} ms after the Workload API returned; ${statuses.length} requests`);
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
    expect(took).toBeLessThanOrEqual(2000);
  }, 180_000);
});
