import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { connect, createServer, type Server, type Socket } from "node:net";
import { type DevApi, prodId as ID, onlyProd as only, startProdApis, tempDir } from "../support/dev-api.ts";
import { freePort } from "../support/net.ts";
import { stopAll } from "../support/proc.ts";
import { startSvcProxy, waitForLog } from "../support/proxy.ts";
import { type DigestServer, sendAndDigest, startDigestServer } from "../support/tcp-peers.ts";
import { waitUntil } from "../support/wait.ts";

/**
 * TCP through real svc-proxy processes with SVIDs from the development Workload API: the three modes,
 * half-close, peer restrictions both ways, backpressure, an unreachable target.
 */
const dir = tempDir();
const apis: Record<string, DevApi> = {};
let target: DigestServer;
let silent: Server;
let silentPort: number;
const silentSockets: Socket[] = [];

beforeAll(async () => {
  Object.assign(apis, await startProdApis(dir, ["web", "api", "db", "central"]));
  target = await startDigestServer();
  // A target that accepts and never reads.
  silent = createServer((s) => {
    s.pause();
    silentSockets.push(s);
  });
  await new Promise<void>((r) => silent.listen(0, "127.0.0.1", () => r()));
  silentPort = (silent.address() as { port: number }).port;
});
afterAll(async () => {
  // First, or the proxies would wait out their drain time for the stalled connection.
  for (const s of silentSockets) s.destroy();
  silent.close();
  await stopAll();
  target.server.close();
});

async function proxy(as: string, port: number, listener: Record<string, unknown>, metricsAddr = "0") {
  return startSvcProxy({
    spiffe: { workload_socket_path: apis[as]?.socket },
    metricsAddr,
    listeners: [{ name: "tcp", protocol: "tcp", address: `127.0.0.1:${port}`, ...listener }],
  });
}

/** A server proxy as `api` in front of `targetPort` that admits `web`, and a client proxy as `clientAs`. */
async function pair(o: { clientAs?: string; clientAllows?: string[]; targetPort?: number } = {}) {
  const [serverPort, clientPort, metricsPort] = [await freePort(), await freePort(), await freePort()];
  const server = await proxy("api", serverPort, {
    mode: "server",
    target: { url: `tcp://127.0.0.1:${o.targetPort ?? target.port}` },
    source: { spiffe_ids: only("web") },
  });
  const client = await proxy(
    o.clientAs ?? "web",
    clientPort,
    {
      mode: "client",
      target: { url: `tls://127.0.0.1:${serverPort}`, spiffe_ids: o.clientAllows ?? only("api") },
    },
    `127.0.0.1:${metricsPort}`,
  );
  return { server, client, clientPort, serverPort, metricsPort };
}

/** Connects and collects everything until the proxy closes the connection. */
function closedWith(port: number, send = "hello"): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(port, "127.0.0.1", () => s.write(send));
    let data = "";
    s.on("data", (d) => {
      data += d;
    });
    s.on("close", () => resolve(data));
    s.on("error", reject);
  });
}

describe("TCP client → server proxy pair", () => {
  test("every byte arrives, the half-close is passed on, and the answer comes back", async () => {
    const { clientPort, metricsPort } = await pair();
    const r = await sendAndDigest(clientPort, 8 * 1024 * 1024 + 17);
    expect(r.reply).toBe(r.sent);
    // The byte counts are recorded when the connection closes, which the proxy sees after the caller.
    let metrics = "";
    await waitUntil("the closed connection in the metrics", async () => {
      metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
      return metrics.includes('direction="request"} 8388625');
    });
    expect(metrics).toContain('svc_proxy_stream_bytes_total{listener="tcp",direction="request"} 8388625');
    expect(metrics).toContain('svc_proxy_connections_total{listener="tcp"} 1');
  });

  test("central mode between them carries the stream too", async () => {
    const [serverPort, centralPort, clientPort] = [await freePort(), await freePort(), await freePort()];
    await proxy("api", serverPort, {
      mode: "server",
      target: { url: `tcp://127.0.0.1:${target.port}` },
      source: { spiffe_ids: only("central") },
    });
    await proxy("central", centralPort, {
      mode: "central",
      target: { url: `tls://127.0.0.1:${serverPort}`, spiffe_ids: only("api") },
      source: { spiffe_ids: only("web") },
    });
    await proxy("web", clientPort, {
      mode: "client",
      target: { url: `tls://127.0.0.1:${centralPort}`, spiffe_ids: only("central") },
    });
    const r = await sendAndDigest(clientPort, 1024 * 1024);
    expect(r.reply).toBe(r.sent);
  });

  test("a caller that matches no source pattern is closed before the target is dialled", async () => {
    const before = target.connections();
    const { clientPort, server } = await pair({ clientAs: "db" });
    expect(await closedWith(clientPort)).toBe("");
    const refusal = await waitForLog(server, "caller refused");
    expect(target.connections()).toBe(before);
    expect(refusal).toMatchObject({ level: "warn", listener: "tcp", code: "unauthorized_peer" });
    expect(String(refusal?.reason)).toStartWith(`peer ${ID("db")} matches none of 1 allowed pattern(s)`);
  });

  test("a target whose ID matches no target pattern is refused and the caller closed", async () => {
    const before = target.connections();
    const { clientPort, client } = await pair({ clientAllows: only("db") });
    expect(await closedWith(clientPort)).toBe("");
    expect(target.connections()).toBe(before);
    const failure = await waitForLog(client, "target failed");
    expect(String(failure?.reason)).toMatch(
      new RegExp(`^target 127\\.0\\.0\\.1:\\d+ refused: peer ${ID("api")} matches none of 1 allowed pattern`),
    );
  });

  test("an unreachable target closes the caller and is logged", async () => {
    const port = await freePort();
    const dead = await freePort();
    const p = await proxy("api", port, { mode: "server", target: { url: `tcp://127.0.0.1:${dead}` } });
    // Server mode: the caller must present an SVID, so use a client proxy in front.
    const clientPort = await freePort();
    await proxy("web", clientPort, { mode: "client", target: { url: `tls://127.0.0.1:${port}` } });
    expect(await closedWith(clientPort)).toBe("");
    expect((await waitForLog(p, "target failed")).reason).toBe(
      `target 127.0.0.1:${dead} unreachable (ECONNREFUSED)`,
    );
  });

  test("a target that stops reading holds the sender back instead of filling the proxies", async () => {
    const { clientPort } = await pair({ targetPort: silentPort });
    const accepted = await new Promise<number>((resolve) => {
      const s = connect(clientPort, "127.0.0.1");
      const block = new Uint8Array(1 << 20);
      let written = 0;
      let stalled: ReturnType<typeof setTimeout> | undefined;
      const done = () => {
        s.destroy();
        resolve(written);
      };
      const pump = () => {
        clearTimeout(stalled);
        // Bounded: stop after 512 MiB even if nothing pushes back.
        while (written < 512 * 1024 * 1024) {
          written += block.length;
          if (!s.write(block)) {
            stalled = setTimeout(done, 1500);
            return void s.once("drain", pump);
          }
        }
        done();
      };
      s.once("connect", pump);
    });
    // Socket buffers of three connections and two proxies' stream buffers, not the whole stream.
    expect(accepted).toBeLessThan(64 * 1024 * 1024);
  });
});
