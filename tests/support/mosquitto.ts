import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { spawnSync } from "bun";
import { waitForPort } from "./net.ts";
import { type Proc, spawnProc } from "./proc.ts";

/**
 * Debian's mosquitto as a test broker on a loopback port: anonymous (or `users` with passwords), no
 * persistence, MQTT 3.1.1 and 5; `extra` adds lines to its configuration.
 * stop() and start() take it down and bring it back on the same port (broker outages); `started: false`
 * leaves it down at first.
 */
export interface Broker {
  port: number;
  start(): Promise<void>;
  stop(): Promise<void>;
  /** Sends the running broker a signal (SIGSTOP: it stops reading and answering, its sockets stay open). */
  signal(name: NodeJS.Signals): void;
  /** Bytes that arrived on the broker's side of its connections and that it has not read yet. */
  unread(): number;
}

const MOSQUITTO = ["/usr/sbin/mosquitto", "/usr/bin/mosquitto"].find(existsSync) ?? "mosquitto";

export async function startBroker(
  dir: string,
  port: number,
  o: { persistent?: boolean; started?: boolean; users?: Record<string, string>; extra?: string } = {},
): Promise<Broker> {
  const conf = join(dir, `mosquitto-${port}.conf`);
  // Persistent: sessions and their queued messages survive a restart (saved at shutdown), and an offline
  // subscriber's queue is unbounded (mosquitto drops beyond 1000 queued messages by default).
  const persistence = o.persistent
    ? `persistence true\npersistence_location ${dir}/\npersistence_file mosquitto-${port}.db\nmax_queued_messages 0\n`
    : "persistence false\n";
  // Users: only they may connect, each with its password.
  let auth = "allow_anonymous true\n";
  if (o.users) {
    const passwords = join(dir, `mosquitto-${port}.passwd`);
    writeFileSync(passwords, "");
    for (const [user, password] of Object.entries(o.users))
      spawnSync(["mosquitto_passwd", "-b", passwords, user, password]);
    auth = `allow_anonymous false\npassword_file ${passwords}\n`;
  }
  // Started as root, mosquitto would drop to its own user, which cannot write the persistence file or read
  // the password file in the test's private directory (it failed to save its queues at shutdown).
  const user = process.getuid?.() === 0 ? "user root\n" : "";
  writeFileSync(
    conf,
    `${user}listener ${port} 127.0.0.1\n${auth}${persistence}log_dest stderr\n${o.extra ?? ""}`,
  );
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
    signal(name) {
      proc?.proc.kill(name);
    },
    unread() {
      // /proc/net/tcp: "sl local rem st tx_queue:rx_queue …", addresses as hex "IP:PORT".
      const lines = readFileSync("/proc/net/tcp", "utf8").split("\n").slice(1);
      let bytes = 0;
      for (const l of lines) {
        const f = l.trim().split(/\s+/);
        if (f.length < 5 || Number.parseInt(f[1]?.split(":")[1] ?? "", 16) !== port || f[3] !== "01")
          continue;
        bytes += Number.parseInt(f[4]?.split(":")[1] ?? "0", 16);
      }
      return bytes;
    },
  };
  if (o.started !== false) await broker.start();
  return broker;
}
