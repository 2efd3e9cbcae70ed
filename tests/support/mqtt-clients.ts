import { connect as netConnect } from "node:net";
import { connect, connectAsync, type IClientOptions, type IConnackPacket, type MqttClient } from "mqtt";
import mqttPacket, { type Packet } from "mqtt-packet";
import { spawnProc } from "./proc.ts";

/** mqtt.js and mosquitto_pub/sub as test clients of a broker or of a proxy in front of one. */
export function mqttClient(port: number, o: IClientOptions = {}): Promise<MqttClient> {
  return connectAsync({
    host: "127.0.0.1",
    port,
    protocolVersion: 5,
    reconnectPeriod: 0,
    connectTimeout: 10_000,
    ...o,
  });
}

/** A subscriber that records every payload (as text) of `topic`, in arrival order. */
export async function collect(port: number, topic: string, o: IClientOptions = {}) {
  const client = await mqttClient(port, o);
  const messages: string[] = [];
  client.on("message", (_t, payload) => messages.push(payload.toString()));
  await client.subscribeAsync(topic, { qos: 1 });
  return {
    client,
    messages,
    /** Waits until `n` messages arrived, at most `timeoutMs`. */
    async until(n: number, timeoutMs = 20_000) {
      const deadline = Date.now() + timeoutMs;
      while (messages.length < n && Date.now() < deadline) await Bun.sleep(20);
      return messages;
    },
  };
}

/** Runs mosquitto_pub or mosquitto_sub to completion (bounded) and returns its exit code and output. */
export async function mosquittoTool(
  tool: "mosquitto_pub" | "mosquitto_sub",
  args: string[],
  timeoutMs = 20_000,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const p = spawnProc(["timeout", String(timeoutMs / 1000), tool, ...args]);
  const code = await p.exited;
  return { code, stdout: p.lines.join("\n"), stderr: p.stderr() };
}

/** Connects with mqtt.js and returns the CONNACK (a refused CONNECT rejects with its reason code). */
export function connackOf(
  port: number,
  o: IClientOptions = {},
): Promise<{ client: MqttClient; connack: IConnackPacket }> {
  return new Promise((resolve, reject) => {
    const client = connect({ host: "127.0.0.1", port, protocolVersion: 5, reconnectPeriod: 0, ...o });
    client.once("connect", (connack) => resolve({ client, connack }));
    client.once("error", (e) => {
      client.end(true);
      reject(e);
    });
  });
}

/**
 * Speaks MQTT by hand: writes `packets` (a Buffer as it is), then returns what came back, decoded, once the other side
 * closed or `waitMs` passed.
 */
export function rawMqtt(
  port: number,
  packets: (Packet | Buffer)[],
  version: 4 | 5 = 5,
  waitMs = 3000,
): Promise<Packet[]> {
  return new Promise((resolve) => {
    const parser = mqttPacket.parser({ protocolVersion: version });
    const got: Packet[] = [];
    parser.on("packet", (p) => got.push(p));
    const s = netConnect(port, "127.0.0.1", () => {
      for (const p of packets)
        s.write(Buffer.isBuffer(p) ? p : mqttPacket.generate(p, { protocolVersion: version }));
    });
    const timer = setTimeout(() => s.destroy(), waitMs);
    s.on("data", (d: Buffer) => parser.parse(d));
    s.on("error", () => {});
    s.on("close", () => {
      clearTimeout(timer);
      resolve(got);
    });
  });
}
