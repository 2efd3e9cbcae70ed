import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { connect } from "node:net";
import mqttPacket from "mqtt-packet";
import { type DevApi, onlyProd as only, startProdApis, tempDir } from "../support/dev-api.ts";
import { type Broker, startBroker } from "../support/mosquitto.ts";
import { collect, connackOf, mosquittoTool, mqttClient, rawMqtt } from "../support/mqtt-clients.ts";
import { freePort } from "../support/net.ts";
import { stopAll } from "../support/proc.ts";
import { startSvcProxy, waitForLog } from "../support/proxy.ts";

/**
 * Unbuffered MQTT through real svc-proxy processes (SVIDs from the development Workload API) to Debian's
 * mosquitto, with mqtt.js and mosquitto_pub/sub as clients: the three modes, MQTT 3.1.1 and 5, QoS 0 and
 * 1, malformed packets, and notarization requests the proxy cannot honour.
 */
const dir = tempDir();
const apis: Record<string, DevApi> = {};
let broker: Broker;
let clientPort: number;
let centralClientPort: number;
let client: Awaited<ReturnType<typeof startSvcProxy>>;

async function proxy(as: string, port: number, listener: Record<string, unknown>) {
  return startSvcProxy({
    spiffe: { workload_socket_path: apis[as]?.socket },
    metricsAddr: "0",
    listeners: [{ name: "mqtt", protocol: "mqtt", address: `127.0.0.1:${port}`, ...listener }],
  });
}

beforeAll(async () => {
  Object.assign(apis, await startProdApis(dir, ["web", "api", "central"]));
  broker = await startBroker(dir, await freePort());
  const [serverPort, centralPort] = [await freePort(), await freePort()];
  [clientPort, centralClientPort] = [await freePort(), await freePort()];
  await proxy("api", serverPort, {
    mode: "server",
    target: { url: `mqtt://127.0.0.1:${broker.port}` },
    source: { spiffe_ids: [`${only("web")[0]}|${only("central")[0]}`] },
  });
  client = await proxy("web", clientPort, {
    mode: "client",
    target: { url: `mqtts://127.0.0.1:${serverPort}`, spiffe_ids: only("api") },
  });
  await proxy("central", centralPort, {
    mode: "central",
    target: { url: `mqtts://127.0.0.1:${serverPort}`, spiffe_ids: only("api") },
    source: { spiffe_ids: only("web") },
  });
  await proxy("web", centralClientPort, {
    mode: "client",
    target: { url: `mqtts://127.0.0.1:${centralPort}`, spiffe_ids: only("central") },
  });
}, 60_000);
afterAll(async () => {
  await stopAll();
});

describe("MQTT through a client → server proxy pair", () => {
  for (const version of [4, 5] as const) {
    test(`MQTT ${version === 4 ? "3.1.1" : "5"}: QoS 0 and 1 publishes arrive; a subscription through the proxies receives`, async () => {
      const topic = `t/${version}/${crypto.randomUUID()}`;
      const direct = await collect(broker.port, topic);
      const proxied = await collect(clientPort, topic, { protocolVersion: version });
      const pub = await mqttClient(clientPort, { protocolVersion: version });
      await pub.publishAsync(topic, "zero", { qos: 0 });
      await pub.publishAsync(topic, "one", { qos: 1 });
      expect(await direct.until(2)).toEqual(["zero", "one"]);
      expect(await proxied.until(2)).toEqual(["zero", "one"]);
      await Promise.all([pub, direct.client, proxied.client].map((c) => c.endAsync()));
    });
  }

  test("mosquitto_pub and mosquitto_sub through the proxies, 3.1.1 and 5, QoS 1", async () => {
    const topic = `tools/${crypto.randomUUID()}`;
    // A session that outlives its connection: subscribe and exit once the broker acknowledged (-E), so
    // the messages published next are queued for it, then collect them. No wait for a subscription.
    const session = ["-h", "127.0.0.1", "-p", String(clientPort), "-V", "mqttv5", "-q", "1", "-c"];
    const id = ["-i", `tools-${crypto.randomUUID().slice(0, 8)}`, "-x", "60"];
    expect(await mosquittoTool("mosquitto_sub", [...session, ...id, "-t", topic, "-E"])).toMatchObject({
      code: 0,
    });
    for (const [v, msg] of [
      ["mqttv311", "from 3.1.1"],
      ["mqttv5", "from 5"],
    ] as const) {
      const pub = await mosquittoTool("mosquitto_pub", [
        "-h",
        "127.0.0.1",
        "-p",
        String(clientPort),
        "-V",
        v,
        "-q",
        "1",
        "-t",
        topic,
        "-m",
        msg,
      ]);
      expect(pub).toMatchObject({ code: 0, stderr: "" });
    }
    const r = await mosquittoTool("mosquitto_sub", [...session, ...id, "-t", topic, "-C", "2"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe("from 3.1.1\nfrom 5");
  });

  test("central mode between them carries publishes too", async () => {
    const topic = `central/${crypto.randomUUID()}`;
    const direct = await collect(broker.port, topic);
    const pub = await mqttClient(centralClientPort);
    await pub.publishAsync(topic, "via central", { qos: 1 });
    expect(await direct.until(1)).toEqual(["via central"]);
    await Promise.all([pub.endAsync(), direct.client.endAsync()]);
  });

  test("a malformed packet closes that connection only, with the reason logged", async () => {
    const survivor = await mqttClient(clientPort);
    const closed = await new Promise<string>((resolve) => {
      const s = connect(clientPort, "127.0.0.1", () =>
        s.write(mqttPacket.generate({ cmd: "connect", clientId: "bad", protocolVersion: 4 } as never)),
      );
      let data = "";
      s.on("data", (d) => {
        data += d.toString("hex");
        // After mosquitto's CONNACK, a PUBLISH whose remaining length needs a fifth byte.
        s.write(Buffer.from([0x30, 0xff, 0xff, 0xff, 0xff, 0x01]));
      });
      s.on("close", () => resolve(data));
    });
    expect(closed).toBe("20020000");
    const line = await waitForLog(client, "connection closed");
    expect(line.reason).toBe(
      "malformed MQTT packet from the caller: remaining length is longer than four bytes",
    );
    await survivor.publishAsync("still/open", "yes", { qos: 1 });
    await survivor.endAsync();
  });

  test("a notarization level on CONNECT where there is no notary is answered with svc.notary-error", async () => {
    const { client: c, connack } = await connackOf(clientPort, {
      properties: { userProperties: { "svc.notarization": "workload" } },
    });
    expect(connack.reasonCode).toBe(0);
    expect(connack.properties?.userProperties?.["svc.notary-error"]).toBe(
      "the notary is not enabled on this proxy",
    );
    await c.endAsync();
  });

  test("an unknown notarization level is refused with CONNACK 0x83 naming the allowed levels", async () => {
    const [connack, ...rest] = await rawMqtt(clientPort, [
      {
        cmd: "connect",
        clientId: "levels",
        protocolVersion: 5,
        properties: { userProperties: { "svc.notarization": "everything" } },
      },
    ]);
    expect(connack).toMatchObject({
      cmd: "connack",
      reasonCode: 0x83,
      properties: {
        reasonString:
          'unknown svc.notarization level "everything" (allowed: workload, logRequest, signRequest)',
      },
    });
    expect(rest).toEqual([]);
  });
});
