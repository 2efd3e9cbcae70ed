import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { waitForPort } from "./net.ts";
import { type Proc, spawnProc } from "./proc.ts";

/**
 * Debian's mosquitto as a test broker on a loopback port: anonymous, no persistence, MQTT 3.1.1 and 5.
 * stop() and start() take it down and bring it back on the same port (broker outages); `started: false`
 * leaves it down at first.
 */
export interface Broker {
  port: number;
  start(): Promise<void>;
  stop(): Promise<void>;
}

const MOSQUITTO = ["/usr/sbin/mosquitto", "/usr/bin/mosquitto"].find(existsSync) ?? "mosquitto";

export async function startBroker(
  dir: string,
  port: number,
  o: { persistent?: boolean; started?: boolean } = {},
): Promise<Broker> {
  const conf = join(dir, `mosquitto-${port}.conf`);
  // Persistent: sessions and their queued messages survive a restart (saved at shutdown), and an offline
  // subscriber's queue is unbounded (mosquitto drops beyond 1000 queued messages by default).
  const persistence = o.persistent
    ? `persistence true\npersistence_location ${dir}/\npersistence_file mosquitto-${port}.db\nmax_queued_messages 0\n`
    : "persistence false\n";
  writeFileSync(conf, `listener ${port} 127.0.0.1\nallow_anonymous true\n${persistence}log_dest stderr\n`);
  let proc: Proc | undefined;
  const broker: Broker = {
    port,
    async start() {
      proc = spawnProc([MOSQUITTO, "-c", conf]);
      await waitForPort(port, 20_000);
    },
    async stop() {
      await proc?.stop();
      proc = undefined;
    },
  };
  if (o.started !== false) await broker.start();
  return broker;
}
