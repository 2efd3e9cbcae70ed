import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createServer, request, type Server } from "node:http";
import { waitForPort } from "../support/net.ts";
import { type Proc, stopAll } from "../support/proc.ts";
import { exactId, spawnAsWorkload, svcProxyAs, useTestbed, workload } from "./support.ts";
import { peers } from "./testbed/peers.ts";
import { freePort } from "./testbed/process.ts";

/**
 * svc-proxy's HTTP listeners with SVIDs from the real SPIRE agent (pod-form IDs of pods that exist in the
 * apiserver), and across an independent SPIFFE peer: ghostunnel on either side.
 */
const testbed = useTestbed();
let upstream: Server;
let upstreamPort: number;
beforeAll(async () => {
  upstreamPort = await freePort();
  upstream = createServer((req, res) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ path: req.url, peer: req.headers["svc-peer-id"] ?? null }));
  });
  await new Promise<void>((r) => upstream.listen(upstreamPort, "127.0.0.1", () => r()));
});
afterAll(async () => {
  await stopAll();
  upstream.close();
});

const listening = (port: number) => waitForPort(port, 60_000);

function svcProxy(as: string, listener: Record<string, unknown>): Proc {
  return svcProxyAs(testbed(), as, { listeners: [{ name: "l", ...listener }] });
}

function ghostunnel(as: string, args: string[]): Proc {
  const tb = testbed();
  return spawnAsWorkload(tb, workload(tb, as), [
    peers().ghostunnel,
    ...args,
    `--use-workload-api-addr=unix://${tb.spire.agentSocket}`,
  ]);
}

function get(port: number, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    request({ host: "127.0.0.1", port, path }, (res) => {
      let body = "";
      res.on("data", (d) => {
        body += d;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    })
      .on("error", reject)
      .end();
  });
}

describe("svc-proxy with SPIRE-issued pod identities", () => {
  test("client → server pair: the target learns the caller's pod-form SPIFFE ID; another pod is refused", async () => {
    const tb = testbed();
    const [web, api] = [workload(tb, "web"), workload(tb, "api")];
    const [serverPort, webPort, intruderPort] = [await freePort(), await freePort(), await freePort()];
    svcProxy("api", {
      address: `127.0.0.1:${serverPort}`,
      mode: "server",
      target: { url: `http://127.0.0.1:${upstreamPort}` },
      source: { spiffe_ids: [exactId(web.spiffeId)] },
    });
    const target = { url: `https://127.0.0.1:${serverPort}`, spiffe_ids: [exactId(api.spiffeId)] };
    svcProxy("web", { address: `127.0.0.1:${webPort}`, mode: "client", target });
    svcProxy("intruder", { address: `127.0.0.1:${intruderPort}`, mode: "client", target });
    for (const p of [serverPort, webPort, intruderPort]) await listening(p);
    const ok = await get(webPort, "/pods");
    expect(ok.status).toBe(200);
    expect(JSON.parse(ok.body)).toEqual({ path: "/pods", peer: web.spiffeId });
    const refused = await get(intruderPort, "/pods");
    expect(refused.status).toBe(502);
    expect(refused.body).toContain("it may not allow this proxy's SPIFFE ID");
  }, 120_000);
});

describe("svc-proxy and ghostunnel", () => {
  test("svc-proxy client mode → ghostunnel server → target", async () => {
    const tb = testbed();
    const [web, api] = [workload(tb, "web"), workload(tb, "api")];
    const [ghPort, webPort] = [await freePort(), await freePort()];
    ghostunnel("api", [
      "server",
      `--listen=127.0.0.1:${ghPort}`,
      `--target=127.0.0.1:${upstreamPort}`,
      `--allow-uri=${web.spiffeId}`,
    ]);
    svcProxy("web", {
      address: `127.0.0.1:${webPort}`,
      mode: "client",
      target: { url: `https://127.0.0.1:${ghPort}`, spiffe_ids: [exactId(api.spiffeId)] },
    });
    for (const p of [ghPort, webPort]) await listening(p);
    const r = await get(webPort, "/through-ghostunnel");
    expect(r.status).toBe(200);
    // ghostunnel relays bytes: the target gets no caller identity from it.
    expect(JSON.parse(r.body)).toEqual({ path: "/through-ghostunnel", peer: null });
  }, 120_000);

  test("ghostunnel client → svc-proxy server mode → target, with Svc-Peer-ID", async () => {
    const tb = testbed();
    const [web, api] = [workload(tb, "web"), workload(tb, "api")];
    const [serverPort, ghPort] = [await freePort(), await freePort()];
    svcProxy("api", {
      address: `127.0.0.1:${serverPort}`,
      mode: "server",
      target: { url: `http://127.0.0.1:${upstreamPort}` },
      source: { spiffe_ids: [exactId(web.spiffeId)] },
    });
    await listening(serverPort);
    ghostunnel("web", [
      "client",
      `--listen=127.0.0.1:${ghPort}`,
      `--target=127.0.0.1:${serverPort}`,
      `--verify-uri=${api.spiffeId}`,
    ]);
    await listening(ghPort);
    const r = await get(ghPort, "/from-ghostunnel");
    expect(r.status).toBe(200);
    expect(JSON.parse(r.body)).toEqual({ path: "/from-ghostunnel", peer: web.spiffeId });
  }, 120_000);
});
