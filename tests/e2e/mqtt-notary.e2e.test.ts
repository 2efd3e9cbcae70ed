import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import type { IConnackPacket, IPubackPacket } from "mqtt-packet";
import { verifyReceipt } from "../../lib/notary-objects/receipt.ts";
import { verifyStatement } from "../../lib/notary-objects/statement.ts";
import { loadBundleFile } from "../../lib/spiffe/bundle-file.ts";
import { connackOf, rawMqtt } from "../support/mqtt-clients.ts";
import { waitForPort } from "../support/net.ts";
import { stopAll } from "../support/proc.ts";
import { exactId, svcProxyAs, useTestbed, workload, workloadHome } from "./support.ts";
import { freePort } from "./testbed/process.ts";

/**
 * MQTT notarization (docs/proxy-mqtt.md) with SPIRE pod identities: the test bed's mosquitto behind a
 * server proxy running as pod api-0 (and one as the stale pod, whose UID does not match); a client proxy
 * as web-0 with the notary, an MQTT listener and an HTTP listener serving notary-query.
 */
const testbed = useTestbed();
const ports = { api: 0, stale: 0, mqtt: 0, staleMqtt: 0, query: 0 };

beforeAll(async () => {
  const tb = testbed();
  for (const k of Object.keys(ports)) ports[k as keyof typeof ports] = await freePort();
  const web = workload(tb, "web");
  const { dir: work, kubeconfig } = workloadHome(tb, "web", "mqtt-notary-e2e");
  const proxy = (as: string, config: object) => svcProxyAs(tb, as, config, { KUBECONFIG: kubeconfig });
  for (const [as, port] of [
    ["api", ports.api],
    ["stale", ports.stale],
  ] as const)
    proxy(as, {
      listeners: [
        {
          name: "broker",
          protocol: "mqtt",
          address: `127.0.0.1:${port}`,
          mode: "server",
          target: { url: `mqtt://127.0.0.1:${tb.mosquitto.port}` },
          source: { spiffe_ids: [exactId(web.spiffeId)] },
        },
      ],
    });
  proxy("web", {
    notary: { enable: true, database: { path: join(work, "notary.db") } },
    listeners: [
      {
        name: "mqtt",
        protocol: "mqtt",
        address: `127.0.0.1:${ports.mqtt}`,
        mode: "client",
        target: {
          url: `mqtts://127.0.0.1:${ports.api}`,
          spiffe_ids: [exactId(workload(tb, "api").spiffeId)],
        },
      },
      {
        name: "stale",
        protocol: "mqtt",
        address: `127.0.0.1:${ports.staleMqtt}`,
        mode: "client",
        target: { url: `mqtts://127.0.0.1:${ports.stale}` },
      },
      {
        name: "query",
        address: `127.0.0.1:${ports.query}`,
        mode: "client",
        target: { url: `https://127.0.0.1:${ports.api}` },
        middlewares: [{ type: "notary-query" }],
      },
    ],
  });
  for (const p of Object.values(ports)) await waitForPort(p, 60_000);
}, 120_000);
afterAll(async () => {
  await stopAll();
});

const query = async (kind: string, id: string) =>
  (await (await fetch(`http://127.0.0.1:${ports.query}/.svc/${kind}/${id}`)).json()) as Record<
    string,
    string
  >;

describe("MQTT notarization", () => {
  test("svc.notarization on CONNECT: the CONNACK carries the ID of a statement about pod api-0", async () => {
    const tb = testbed();
    const { client, connack } = await connackOf(ports.mqtt, {
      properties: { userProperties: { "svc.notarization": "workload" } },
    });
    const id = connack.properties?.userProperties?.["svc.workload-id"] as string;
    expect(id).toMatch(/^[A-Za-z0-9_-]{43}$/);
    // One answer, from the hop that notarizes: the server proxy behind it (no notary) never saw the
    // request, so no svc.notary-error comes back with the statement.
    expect(Object.keys(connack.properties?.userProperties ?? {})).toEqual(["svc.workload-id"]);
    const saved = await query("workload", id);
    const v = await verifyStatement(saved.statement as string, loadBundleFile(tb.spire.bundleFile), id);
    expect(v.claims.svc.spiffeId).toBe(workload(tb, "api").spiffeId);
    await client.endAsync();
  }, 30_000);

  test("a notarized QoS 1 PUBLISH: the PUBACK carries IDs whose receipt and statement verify", async () => {
    const tb = testbed();
    const topic = `notarized/${crypto.randomUUID()}`;
    const replies = await rawMqtt(
      ports.mqtt,
      [
        { cmd: "connect", clientId: "notarized", protocolVersion: 5 },
        {
          cmd: "publish",
          topic,
          payload: "reading=42",
          qos: 1,
          messageId: 7,
          dup: false,
          retain: false,
          properties: { userProperties: { "svc.notarization": "signRequest" } },
        },
      ],
      5,
      2000,
    );
    const puback = replies.find((p) => p.cmd === "puback") as IPubackPacket;
    expect(puback).toMatchObject({ messageId: 7 });
    const props = puback.properties?.userProperties as Record<string, string>;
    expect(Object.keys(props).sort()).toEqual(["svc.receipt-id", "svc.request-id", "svc.workload-id"]);
    const bundles = loadBundleFile(tb.spire.bundleFile);
    const receipt = await query("receipt", props["svc.receipt-id"] as string);
    const v = await verifyReceipt(receipt.receipt as string, bundles, {
      expectedId: props["svc.receipt-id"],
      statementId: props["svc.workload-id"],
      request: { method: "PUBLISH", path: topic, body: "reading=42" },
      // mosquitto answers 0x10, "no matching subscribers": the receipt records what the client saw.
      response: { status: puback.reasonCode ?? 0, body: "" },
    });
    expect(v.claims.svc.requestID).toBe(props["svc.request-id"] as string);
    await expect(
      verifyReceipt(receipt.receipt as string, bundles, { request: { body: "reading=43" } }),
    ).rejects.toThrow("the request body does not match");
    const statement = await query("workload", props["svc.workload-id"] as string);
    await verifyStatement(statement.statement as string, bundles, props["svc.workload-id"]);
  }, 30_000);

  test("an upstream whose pod does not match gets no statement: CONNACK 0x80 and the connection closes", async () => {
    const [connack, ...rest] = await rawMqtt(ports.staleMqtt, [
      {
        cmd: "connect",
        clientId: "stale",
        protocolVersion: 5,
        properties: { userProperties: { "svc.notarization": "workload" } },
      },
    ]);
    expect((connack as IConnackPacket).reasonCode).toBe(0x80);
    expect((connack as IConnackPacket).properties?.reasonString).toContain(
      "svc-proxy: no workload statement: pod",
    );
    expect(rest).toEqual([]);
  }, 30_000);
});
