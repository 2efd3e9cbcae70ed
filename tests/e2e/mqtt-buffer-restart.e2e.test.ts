import { afterAll, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import mqttPacket from "mqtt-packet";
import { tempDir } from "../support/dev-api.ts";
import { metricValue } from "../support/metrics.ts";
import { startBroker } from "../support/mosquitto.ts";
import { mqttClient } from "../support/mqtt-clients.ts";
import { freePort, waitForPort } from "../support/net.ts";
import { stopAll } from "../support/proc.ts";
import { logLines } from "../support/proxy.ts";
import { waitUntil } from "../support/wait.ts";
import { exactId, svcProxyAs, useTestbed, workload, workloadHome } from "./support.ts";

/**
 * The publish buffer on disk (docs/proxy-mqtt.md, "Storage") with SPIRE pod identities: a publisher →
 * client proxy as web-0 (storage.type sqlite) → server proxy as api-0 → a mosquitto of this test. With
 * the broker stopped, 10,000 QoS 1 messages are published while the client proxy is killed (SIGKILL)
 * three times; the broker comes back, and the client proxy is killed twice more while it replays, with
 * no publisher connected. A subscriber must receive every message the publisher saw acknowledged
 * (duplicates allowed), first arrivals in publish order.
 */
const testbed = useTestbed();
afterAll(async () => {
  await stopAll();
}, 30_000);

const TOTAL = 10_000;
const WINDOW = 64;

/**
 * A publisher of messages "0"…"TOTAL-1" on topic meter as client "meter-1", WINDOW in flight, that
 * reconnects whenever its connection ends and sends again from the first message not acknowledged
 * (PUBACKs come in order, so the acknowledged ones are always a prefix). `acked` grows as they come. It
 * gives up after `connections` connections or at `deadline` (ms since the epoch), whatever it has then.
 */
async function publishAll(
  port: number,
  acked: number[],
  onAck: () => void,
  connections: number,
  deadline: number,
): Promise<void> {
  for (let n = 0; n < connections && acked.length < TOTAL && Date.now() < deadline; n++) {
    await waitForPort(port, 60_000);
    await new Promise<void>((resolve) => {
      const parser = mqttPacket.parser({ protocolVersion: 5 });
      const s = connect(port, "127.0.0.1");
      const timer = setTimeout(() => s.destroy(), Math.max(0, deadline - Date.now()));
      s.on("close", () => clearTimeout(timer));
      let sent = acked.length;
      const write = (p: mqttPacket.Packet) => s.write(mqttPacket.generate(p, { protocolVersion: 5 }));
      const pump = () => {
        for (; sent < TOTAL && sent - acked.length < WINDOW; sent++)
          write({
            cmd: "publish",
            topic: "meter",
            payload: String(sent),
            qos: 1,
            messageId: (sent % 65_535) + 1,
            dup: false,
            retain: false,
          });
      };
      parser.on("packet", (p) => {
        if (p.cmd === "connack") pump();
        if (p.cmd !== "puback") return;
        const expected = (acked.length % 65_535) + 1;
        if (p.messageId !== expected || (p.reasonCode ?? 0) >= 0x80) {
          s.destroy(new Error(`PUBACK ${p.messageId} (reason ${p.reasonCode}), expected ${expected}`));
          return;
        }
        acked.push(acked.length);
        onAck();
        if (acked.length === TOTAL) s.end(mqttPacket.generate({ cmd: "disconnect" }, { protocolVersion: 5 }));
        else pump();
      });
      s.on("connect", () => write({ cmd: "connect", clientId: "meter-1", protocolVersion: 5, clean: true }));
      s.on("data", (d: Buffer) => parser.parse(d));
      s.on("error", () => {});
      s.on("close", () => resolve());
    });
  }
}

/**
 * Resolves once `count()` reaches `n`, and fails naming `what` if it has not within `timeoutMs`; `poke` is
 * called by whoever changes the count.
 */
function counter(what: string, count: () => number, timeoutMs = 60_000) {
  const waiters: { n: number; resolve(): void }[] = [];
  return {
    poke() {
      for (const w of waiters.filter((w) => count() >= w.n)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
    },
    reach(n: number): Promise<void> {
      if (count() >= n) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          waiters.splice(waiters.indexOf(waiter), 1);
          reject(new Error(`${count()} of ${n} ${what} within ${timeoutMs} ms`));
        }, timeoutMs);
        const waiter = {
          n,
          resolve: () => {
            clearTimeout(timer);
            resolve();
          },
        };
        waiters.push(waiter);
      });
    },
  };
}

test("SIGKILL five times while publishing and replaying: every acknowledged message arrives, in order", async () => {
  const tb = testbed();
  const [brokerPort, serverPort, clientPort, metricsPort] = [
    await freePort(),
    await freePort(),
    await freePort(),
    await freePort(),
  ];
  const broker = await startBroker(tempDir(), brokerPort);
  const { dir: home } = workloadHome(tb, "web", "mqtt-buffer-restart-e2e");
  // A file of an earlier run of this test would be replayed too: each run starts without one.
  for (const f of ["buffer.db", "buffer.db-wal", "buffer.db-shm"]) rmSync(join(home, f), { force: true });
  const serverProxy = async () => {
    const p = svcProxyAs(tb, "api", {
      listeners: [
        {
          name: "broker",
          protocol: "mqtt",
          address: `127.0.0.1:${serverPort}`,
          mode: "server",
          target: { url: `mqtt://127.0.0.1:${brokerPort}` },
          source: { spiffe_ids: [exactId(workload(tb, "web").spiffeId)] },
        },
      ],
    });
    await waitForPort(serverPort);
    return p;
  };
  const clientProxy = async () => {
    const p = svcProxyAs(tb, "web", {
      metricsAddr: `127.0.0.1:${metricsPort}`,
      listeners: [
        {
          name: "buffered",
          protocol: "mqtt",
          address: `127.0.0.1:${clientPort}`,
          mode: "client",
          target: {
            url: `mqtts://127.0.0.1:${serverPort}`,
            spiffe_ids: [exactId(workload(tb, "api").spiffeId)],
          },
          middlewares: [
            {
              type: "buffer",
              storage: { type: "sqlite", path: join(home, "buffer.db") },
              "reconnect-backoff": { initial: "100ms", max: "1s" },
            },
          ],
        },
      ],
    });
    await waitForPort(clientPort);
    return p;
  };
  const metric = (name: string) => metricValue(metricsPort, name);

  let server = await serverProxy();
  let client = await clientProxy();
  await broker.stop();

  // Publishing with the broker stopped; the client proxy killed three times on the way.
  const acked: number[] = [];
  const acks = counter("messages acknowledged", () => acked.length);
  // Each kill costs the publisher one connection (more if it reconnects before the proxy listens again).
  const publishing = publishAll(clientPort, acked, () => acks.poke(), 20, Date.now() + 120_000);
  for (const at of [2000, 4500, 7000]) {
    await acks.reach(at);
    await client.stop("SIGKILL");
    client = await clientProxy();
  }
  await publishing;
  expect(acked.length).toBe(TOTAL);

  // The broker back, a subscriber listening before the link to it returns.
  await server.stop();
  await broker.start();
  const seen: number[] = [];
  const distinct = new Set<number>();
  const arrivals = counter("messages at the subscriber", () => distinct.size);
  const sub = await mqttClient(brokerPort, { clientId: "meter-sub" });
  sub.on("message", (_t, payload) => {
    const i = Number(payload.toString());
    seen.push(i);
    distinct.add(i);
    arrivals.poke();
  });
  await sub.subscribeAsync("meter", { qos: 1 });
  server = await serverProxy();

  // The replay, without any publisher, killed twice on the way.
  for (const at of [2500, 6000]) {
    await arrivals.reach(at);
    await client.stop("SIGKILL");
    client = await clientProxy();
  }
  try {
    await waitUntil("every message at the subscriber", () => distinct.size >= TOTAL, 120_000);
  } catch {
    const missing = acked.filter((i) => !distinct.has(i));
    process.stderr.write(
      `missing ${missing.length}, the first ${JSON.stringify(missing.slice(0, 20))}; the last run logged:\n${logLines(
        client,
      )
        .filter((l) => l.level !== "debug")
        .map((l) => JSON.stringify(l))
        .join("\n")}\n`,
    );
  }
  expect(acked.filter((i) => !distinct.has(i))).toEqual([]);
  const first = [...distinct];
  expect(first).toEqual(first.slice().sort((a, b) => a - b));
  // The last run read back what the earlier ones left, and empties its file.
  expect(await metric('svc_proxy_mqtt_buffer_replayed_total{listener="buffered"}')).toBeGreaterThan(0);
  const stored = async () => metric('svc_proxy_mqtt_buffer_stored_messages{listener="buffered"}');
  await waitUntil("the file emptied", async () => (await stored()) === 0, 10_000).catch(() => {});
  expect(await stored()).toBe(0);
  process.stderr.write(`buffer e2e: ${seen.length} arrivals for ${TOTAL} messages\n`);
  await sub.endAsync();
}, 300_000);
