import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { type AddressInfo, connect, createServer, type Server, type Socket } from "node:net";
import { type DevApi, onlyProd as only, startProdApis, tempDir } from "../support/dev-api.ts";
import { freePort } from "../support/net.ts";
import { type Proc, stopAll } from "../support/proc.ts";
import { logLines, startSvcProxy } from "../support/proxy.ts";
import { waitUntil } from "../support/wait.ts";

/**
 * timeouts.handshake on every kind of mTLS listener: a caller that opens a connection and never completes
 * the TLS handshake is disconnected, logged and counted as `handshake`, long before the idle timeout; the
 * proxy's other listeners keep serving meanwhile.
 */
const dir = tempDir();
let apis: Record<string, DevApi>;
let proxy: Proc;
let metrics: number;
const ports: Record<string, number> = {};
const KINDS = ["relay", "full", "tcp", "mqtt"] as const;
/** A target that takes connections and never answers a TLS hello. */
let stalled: Server;
const held: Socket[] = [];

beforeAll(async () => {
  apis = await startProdApis(dir, ["api"]);
  for (const k of [...KINDS, "relay-out", "tcp-out"]) ports[k] = await freePort();
  metrics = await freePort();
  stalled = createServer((s) => {
    s.on("error", () => {});
    held.push(s);
  });
  await new Promise<void>((r) => stalled.listen(0, "127.0.0.1", () => r()));
  const stalledPort = (stalled.address() as AddressInfo).port;
  const outward = { mode: "client", timeouts: { handshake: "300ms" } };
  const common = {
    mode: "server",
    source: { spiffe_ids: only("web") },
    timeouts: { handshake: "300ms", idle: "120s" },
  };
  proxy = await startSvcProxy({
    spiffe: { workload_socket_path: apis.api?.socket },
    metricsAddr: `127.0.0.1:${metrics}`,
    listeners: [
      {
        name: "relay",
        address: `127.0.0.1:${ports.relay}`,
        target: { url: "http://127.0.0.1:9" },
        ...common,
      },
      {
        name: "full",
        address: `127.0.0.1:${ports.full}`,
        target: { url: "http://127.0.0.1:9" },
        middlewares: [{ type: "dummy" }],
        ...common,
      },
      {
        name: "tcp",
        protocol: "tcp",
        address: `127.0.0.1:${ports.tcp}`,
        target: { url: "tcp://127.0.0.1:9" },
        ...common,
      },
      {
        name: "mqtt",
        protocol: "mqtt",
        address: `127.0.0.1:${ports.mqtt}`,
        target: { url: "mqtt://127.0.0.1:9" },
        ...common,
      },
      {
        name: "relay-out",
        address: `127.0.0.1:${ports["relay-out"]}`,
        target: { url: `https://127.0.0.1:${stalledPort}`, spiffe_ids: only("web") },
        ...outward,
      },
      {
        name: "tcp-out",
        protocol: "tcp",
        address: `127.0.0.1:${ports["tcp-out"]}`,
        target: { url: `tls://127.0.0.1:${stalledPort}`, spiffe_ids: only("web") },
        ...outward,
      },
    ],
  });
});
afterAll(async () => {
  for (const s of held) s.destroy();
  stalled.close();
  await stopAll();
});

/** Opens a TCP connection, sends `bytes` (not a TLS hello), and resolves when the proxy closes it. */
const silentCaller = (port: number, bytes = "") =>
  new Promise<"closed" | "still open">((resolve) => {
    const s = connect(port, "127.0.0.1", () => bytes && s.write(bytes));
    s.on("error", () => {});
    s.on("close", () => resolve("closed"));
    // Bounded: far below the 120 s idle timeout, far above the 300 ms handshake timeout.
    setTimeout(() => {
      resolve("still open");
      s.destroy();
    }, 10_000);
  });

describe("timeouts.handshake", () => {
  test("a caller that never completes the handshake is disconnected on every kind of listener", async () => {
    const results = await Promise.all(KINDS.map((k) => silentCaller(ports[k] as number)));
    expect(results).toEqual(["closed", "closed", "closed", "closed"]);
    // The log lines arrive through the proxy's stderr, after the close the caller saw: wait for them.
    const refusals = () => logLines(proxy).filter((l) => l.msg === "caller refused");
    await waitUntil(
      "a refusal logged by every listener",
      () => new Set(refusals().map((l) => l.listener)).size === 4,
    );
    expect(new Set(refusals().map((l) => l.listener))).toEqual(new Set(KINDS));
    for (const r of refusals()) expect(r.code).toBe("handshake");
    const text = await (await fetch(`http://127.0.0.1:${metrics}/metrics`)).text();
    for (const k of KINDS)
      expect(text).toMatch(
        new RegExp(`svc_proxy_denied_total\\{listener="${k}",side="source",reason="handshake"\\} [1-9]`),
      );
  });

  test("a target that never completes the handshake is given up after it too: 502 on the HTTP relay, the caller closed on TCP", async () => {
    const res = await fetch(`http://127.0.0.1:${ports["relay-out"]}/`);
    expect(res.status).toBe(502);
    expect(await res.text()).toMatch(/unreachable \(connect timed out after 300 ms\)/);
    expect(await silentCaller(ports["tcp-out"] as number)).toBe("closed");
    await waitUntil("the TCP listener's upstream failure, naming the timeout", () =>
      logLines(proxy).some((l) => l.listener === "tcp-out" && JSON.stringify(l).includes("after 300 ms")),
    );
    // A target that could not be reached is no refusal by the SPIFFE checks.
    const text = await (await fetch(`http://127.0.0.1:${metrics}/metrics`)).text();
    expect(text).not.toMatch(/svc_proxy_denied_total\{listener="(relay|tcp)-out",side="target"/);
    expect(text).toMatch(
      /svc_proxy_stream_failures_total\{listener="tcp-out",reason="target_unreachable"\} 1/,
    );
  });

  test("a half-sent hello is cut off as well", async () => {
    // The first bytes of a TLS record header, then nothing.
    expect(await silentCaller(ports.tcp as number, "\x16\x03\x01")).toBe("closed");
  });
});
