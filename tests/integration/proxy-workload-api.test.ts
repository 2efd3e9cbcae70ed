import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { type DevApi, prodId, startDevApi, tempDir } from "../support/dev-api.ts";
import { freePort } from "../support/net.ts";
import type { Proc } from "../support/proc.ts";
import { BUN, spawnProc, stopAll } from "../support/proc.ts";
import { logLines, startSvcProxy, waitForLog } from "../support/proxy.ts";
import { waitUntil } from "../support/wait.ts";

/**
 * A Workload API that goes away and comes back: the proxy keeps serving with its last SVID, says so in a
 * log line and in svc_proxy_workload_api_up, and takes the new SVID as soon as the API is back.
 */
const dir = tempDir();
const socketPath = join(dir, "agent.sock");
const api = () => startDevApi({ socketPath, spiffeIds: [prodId("web")], caDir: join(dir, "ca") });
let dev: DevApi;
let proxy: Proc;
let metrics: number;

beforeAll(async () => {
  dev = await api();
  metrics = await freePort();
  proxy = await startSvcProxy({
    spiffe: { workload_socket_path: dev.socket },
    metricsAddr: `127.0.0.1:${metrics}`,
    listeners: [
      {
        name: "l",
        address: `127.0.0.1:${await freePort()}`,
        mode: "client",
        target: { url: "http://127.0.0.1:9" },
      },
    ],
  });
});
afterAll(stopAll);

const up = async () => {
  const text = await (await fetch(`http://127.0.0.1:${metrics}/metrics`)).text();
  return /^svc_proxy_workload_api_up (\d)$/m.exec(text)?.[1];
};

describe("Workload API outage", () => {
  test("the proxy serves on its last SVID, says so, and takes a new one once the API is back", async () => {
    await waitUntil("the metrics endpoint", async () => (await up()) === "1", 10_000);
    await dev.proc.stop();
    const warning = await waitForLog(proxy, "Workload API unavailable; serving with the last SVID");
    expect(String(warning.expires)).toMatch(/^\d{4}-\d\d-\d\dT/);
    expect(await up()).toBe("0");
    const rotationsBefore = logLines(proxy).filter((l) => l.msg === "SVID rotated").length;
    dev = await api();
    // The backoff between attempts is at most 30 s; after a short outage it is far below that.
    await waitUntil(
      "a new SVID after the API returned",
      () => logLines(proxy).filter((l) => l.msg === "SVID rotated").length > rotationsBefore,
      30_000,
    );
    expect(await up()).toBe("1");
  });

  test("/readyz answers 503 with the reason once the SVID expired without a new one, and 200 again after", async () => {
    const shortPath = join(dir, "short.sock");
    const short = () =>
      startDevApi({ socketPath: shortPath, spiffeIds: [prodId("web")], caDir: join(dir, "ca"), ttl: "4s" });
    let shortApi = await short();
    const port = await freePort();
    const p = await startSvcProxy({
      spiffe: { workload_socket_path: shortApi.socket },
      metricsAddr: `127.0.0.1:${port}`,
      listeners: [
        {
          name: "l",
          address: `127.0.0.1:${await freePort()}`,
          mode: "client",
          target: { url: "http://127.0.0.1:9" },
        },
      ],
    });
    const probe = async (path: string) => {
      const r = await fetch(`http://127.0.0.1:${port}${path}`);
      return { status: r.status, text: await r.text() };
    };
    await waitUntil("the probes", async () => (await probe("/readyz")).status === 200, 10_000);
    expect(await probe("/healthz")).toEqual({ status: 200, text: "ok\n" });
    await shortApi.proc.stop();
    await waitUntil("not ready", async () => (await probe("/readyz")).status === 503, 15_000);
    expect((await probe("/readyz")).text).toMatch(
      /^not ready: the X\.509-SVID of spiffe:\/\/example\.org\/ns\/prod\/sa\/web expired at \S+ \(last Workload API error: .+\)\n$/,
    );
    expect((await probe("/healthz")).status).toBe(200);
    expect((await probe("/other")).status).toBe(404);
    shortApi = await short();
    await waitUntil("ready again", async () => (await probe("/readyz")).status === 200, 30_000);
    await p.stop();
    await shortApi.proc.stop();
  }, 60_000);
});

describe("a proxy started before its SPIRE agent", () => {
  test("says once what it waits for, answers /readyz with it, and starts when the agent comes", async () => {
    const late = join(dir, "late", "agent.sock");
    const port = await freePort();
    const listen = await freePort();
    const p = spawnProc([BUN, "cmd/svc-proxy.ts"], {
      SVC_PROXY_CONFIG: JSON.stringify({
        spiffe: { workload_socket_path: `unix://${late}` },
        metricsAddr: `127.0.0.1:${port}`,
        listeners: [
          {
            name: "l",
            address: `127.0.0.1:${listen}`,
            mode: "client",
            target: { url: "http://127.0.0.1:9" },
          },
        ],
      }),
    });
    const line = await waitForLog(p, "Workload API socket does not exist (yet): waiting for the SPIRE agent");
    expect(line).toMatchObject({
      socket: late,
      check: expect.stringContaining("spiffe.workload_socket_path"),
    });
    const probe = async (path: string) => {
      const r = await fetch(`http://127.0.0.1:${port}${path}`);
      return { status: r.status, text: await r.text() };
    };
    await waitUntil(
      "the probes",
      async () => (await probe("/healthz").catch(() => undefined))?.status === 200,
      10_000,
    );
    expect(await probe("/readyz")).toEqual({
      status: 503,
      text: expect.stringMatching(
        new RegExp(
          `^not ready: waiting for an X\\.509-SVID from the Workload API at unix://${late.replaceAll(".", "\\.")}`,
        ),
      ),
    });
    // The API's failed attempts, retried with backoff, are logged once each (they all say the same).
    await waitForLog(p, "Workload API");
    const agent = await startDevApi({ socketPath: late, spiffeIds: [prodId("web")], caDir: join(dir, "ca") });
    await waitForLog(p, "listening", 30_000);
    await waitUntil("ready", async () => (await probe("/readyz")).status === 200, 10_000);
    const failures = logLines(p).filter((l) => l.msg === "Workload API");
    expect(new Set(failures.map((l) => l.error)).size).toBe(failures.length);
    await p.stop();
    await agent.proc.stop();
  });
});
