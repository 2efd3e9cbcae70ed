import { afterAll, beforeAll, expect, test } from "bun:test";
import { connect as netConnect, type Socket } from "node:net";
import { join } from "node:path";
import mqttPacket, { type Packet } from "mqtt-packet";
import { type DevApi, prodId, startProdApis, tempDir } from "../support/dev-api.ts";
import { startBroker } from "../support/mosquitto.ts";
import { collect } from "../support/mqtt-clients.ts";
import { freePort } from "../support/net.ts";
import { stopAll } from "../support/proc.ts";
import { startSvcProxy, waitForLog } from "../support/proxy.ts";
import { waitUntil } from "../support/wait.ts";

/**
 * A publish buffer on a server-mode listener admits the clients of several workloads; a client
 * identifier's session belongs to the workload whose client made it (docs/proxy-mqtt.md). Found by an
 * adversarial trial: another workload's client with the same client identifier took the session over and
 * its overflow policy evicted the first workload's acknowledged messages. Each workload reaches the buffer
 * through its own client-mode proxy, over SPIFFE mTLS.
 */
const dir = tempDir();
const apis: Record<string, DevApi> = {};
beforeAll(async () => {
  Object.assign(apis, await startProdApis(dir, ["web", "api", "evil"]));
});
afterAll(stopAll, 30_000);

/** A raw MQTT 5 client on `port`: what it receives, and a way to send. */
function client(port: number, clientId: string) {
  const got: Packet[] = [];
  const parser = mqttPacket.parser({ protocolVersion: 5 });
  parser.on("packet", (p) => got.push(p));
  const socket: Socket = netConnect({ port, host: "127.0.0.1" });
  socket.on("data", (d: Buffer) => parser.parse(d));
  socket.on("error", () => {});
  const send = (p: Packet) => socket.write(mqttPacket.generate(p, { protocolVersion: 5 }));
  send({ cmd: "connect", clientId, protocolVersion: 5, clean: true, keepalive: 60 });
  const connack = async () => {
    await waitUntil(`CONNACK for ${clientId}`, () => got.some((p) => p.cmd === "connack"), 10_000);
    return (got.find((p) => p.cmd === "connack") as { reasonCode?: number }).reasonCode;
  };
  return { got, send, socket, connack };
}

/** Retained, each on its own topic: a subscriber that comes after the delivery still gets every one. */
const publish = (payload: string, messageId: number): Packet => ({
  cmd: "publish",
  topic: `owned/${payload}`,
  payload,
  qos: 1,
  messageId,
  dup: false,
  retain: true,
});

test("a client of another workload cannot take over a session, also after a restart; its own identifiers work", async () => {
  const broker = await startBroker(dir, await freePort(), { started: false });
  const [bufferPort, webPort, evilPort] = [await freePort(), await freePort(), await freePort()];
  const config = (as: string, l: object) => ({
    spiffe: { workload_socket_path: apis[as]?.socket },
    metricsAddr: "0",
    listeners: [{ name: "mqtt", protocol: "mqtt", ...l }],
  });
  const bufferConfig = config("api", {
    address: `127.0.0.1:${bufferPort}`,
    mode: "server",
    target: { url: `mqtt://127.0.0.1:${broker.port}` },
    source: { spiffe_ids: [`^${prodId("web")}$`, `^${prodId("evil")}$`] },
    middlewares: [
      {
        type: "buffer",
        storage: { type: "sqlite", path: join(dir, "owners.db"), "max-messages": 3 },
        "overflow-policy": "drop-oldest",
        "reconnect-backoff": { initial: "100ms", max: "1s" },
      },
    ],
  });
  let server = await startSvcProxy(bufferConfig);
  for (const [as, port] of [
    ["web", webPort],
    ["evil", evilPort],
  ] as const)
    await startSvcProxy(
      config(as, {
        address: `127.0.0.1:${port}`,
        mode: "client",
        target: { url: `mqtts://127.0.0.1:${bufferPort}` },
      }),
    );

  const web = client(webPort, "sensor-1");
  expect(await web.connack()).toBe(0);
  for (let i = 1; i <= 3; i++) web.send(publish(`web-${i}`, i));
  await waitUntil(
    "web's three PUBACKs",
    () => web.got.filter((p) => p.cmd === "puback").length === 3,
    10_000,
  );

  // evil's client with web's identifier: refused, and web's connection is left alone.
  const evil = client(evilPort, "sensor-1");
  expect(await evil.connack()).toBe(0x87);
  const refused = await waitForLog(server, "CONNECT refused", 10_000, { client_id: "sensor-1" });
  expect(refused.peer).toBe(prodId("evil"));
  expect(web.got.some((p) => p.cmd === "disconnect")).toBe(false);
  web.socket.destroy();
  evil.socket.destroy();

  // After a restart the session, read back from the file, is still web's.
  await server.stop("SIGKILL");
  server = await startSvcProxy(bufferConfig);
  const again = client(evilPort, "sensor-1");
  expect(await again.connack()).toBe(0x87);
  again.socket.destroy();
  // evil's own identifier is its own session.
  const own = client(evilPort, "evil-1");
  expect(await own.connack()).toBe(0);
  own.send(publish("evil-own", 1));
  await waitUntil("evil's PUBACK", () => own.got.some((p) => p.cmd === "puback"), 10_000);
  own.socket.destroy();

  await broker.start();
  const sub = await collect(broker.port, "owned/#");
  const got = await sub.until(4);
  expect(got.filter((m) => m.startsWith("web-"))).toEqual(["web-1", "web-2", "web-3"]);
  expect(got).toContain("evil-own");
  await sub.client.endAsync();
  await broker.stop();
}, 90_000);
