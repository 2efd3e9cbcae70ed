/**
 * MQTT QoS 1 messages per second from mqtt.js (100 in flight by default, 64-byte payloads, MQTT 5) to
 * Debian's mosquitto: direct, through a ghostunnel client→server pair (the bytes relayed over SPIFFE mTLS,
 * the peer to match), through an unbuffered svc-proxy pair, and through svc-proxy pairs whose client proxy
 * buffers in memory and in an SQLite file (storage.type sqlite). Every path once per round after a
 * warm-up, rounds alternating (A B C D A B C D …); medians with the range over rounds, ratios, and the
 * CPU time per message of the two proxies, of mosquitto and of the load generator (this process: publisher
 * and subscriber). Needs `make build`, mosquitto and ghostunnel (`tests/e2e/build-peers.sh ghostunnel`).
 *
 *   bun bench/mqtt.ts [--messages 20000] [--inflight 100] [--rounds 5]
 *                     [--baseline path/to/svc-proxy] [--out bench/results/mqtt.md]
 *
 * --baseline adds the unbuffered and in-memory pairs of another svc-proxy binary (an earlier build).
 */

import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import type { Subprocess } from "bun";
import { connectAsync } from "mqtt";
import { freePort, waitForPort } from "../tests/support/net.ts";
import { cpuUs, median, range, ratio } from "./stats.ts";
import { BenchRun, report } from "./support.ts";

const { values: o } = parseArgs({
  options: {
    messages: { type: "string", default: "20000" },
    inflight: { type: "string", default: "100" },
    rounds: { type: "string", default: "5" },
    baseline: { type: "string" },
    out: { type: "string" },
  },
});

/** Counts what mosquitto delivers to a subscriber of bench/#. */
class Arrivals {
  count = 0;
  private waiter: { n: number; resolve(): void } | undefined;
  constructor(client: Awaited<ReturnType<typeof connectAsync>>) {
    client.on("message", () => {
      this.count++;
      if (this.waiter && this.count >= this.waiter.n) this.waiter.resolve();
    });
  }
  /** Resolves once `n` messages arrived since the count was reset; fails after 60 s. */
  reach(n: number): Promise<void> {
    if (this.count >= n) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`${this.count} of ${n} messages arrived in 60 s`)),
        60_000,
      );
      this.waiter = {
        n,
        resolve: () => {
          clearTimeout(timer);
          this.waiter = undefined;
          resolve();
        },
      };
    });
  }
}

/**
 * QoS 1 publishes with up to --inflight unacknowledged: messages acknowledged per second, and delivered per
 * second (until the subscriber has all of them: a buffer acknowledges before it delivers).
 */
async function mqttRate(port: number, total: number, arrivals: Arrivals) {
  const c = await connectAsync({ host: "127.0.0.1", port, protocolVersion: 5, reconnectPeriod: 0 });
  const payload = Buffer.alloc(64, 1);
  let left = total;
  arrivals.count = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: Number(o.inflight) }, async () => {
      while (left-- > 0) await c.publishAsync("bench/qos1", payload, { qos: 1 });
    }),
  );
  const acked = total / ((performance.now() - started) / 1000);
  await arrivals.reach(total);
  const delivered = total / ((performance.now() - started) / 1000);
  await c.endAsync();
  return { acked, delivered };
}

const run = new BenchRun();
try {
  await run.workloadApis(["client", "server"]);
  const brokerPort = await freePort();
  writeFileSync(
    join(run.dir, "mosquitto.conf"),
    `listener ${brokerPort} 127.0.0.1\nallow_anonymous true\npersistence false\nmax_inflight_messages 0\n`,
  );
  const broker = run.start([
    existsSync("/usr/sbin/mosquitto") ? "/usr/sbin/mosquitto" : "mosquitto",
    "-c",
    join(run.dir, "mosquitto.conf"),
  ]);
  await waitForPort(brokerPort);
  const subscriber = await connectAsync({ host: "127.0.0.1", port: brokerPort, protocolVersion: 5 });
  await subscriber.subscribeAsync("bench/#", { qos: 0 });
  const arrivals = new Arrivals(subscriber);

  let files = 0;
  const pair = (buffer: "none" | "in-memory" | "sqlite", binary?: string) => {
    const storage =
      buffer === "sqlite"
        ? { type: "sqlite", path: join(run.dir, `buffer-${++files}.db`) }
        : { type: buffer };
    return run.svcPair({
      protocol: "mqtt",
      target: brokerPort,
      ...(binary ? { binary } : {}),
      ...(buffer === "none" ? {} : { middlewares: [{ type: "buffer", storage }] }),
    });
  };

  const messages = Number(o.messages);
  const rounds = Number(o.rounds);
  const targets: Record<string, { port: number; procs: Subprocess[] }> = {
    "direct to mosquitto": { port: brokerPort, procs: [] },
    "ghostunnel pair": await run.ghostunnelPair(brokerPort),
    "svc-proxy pair": await pair("none"),
    "svc-proxy pair, buffer in memory": await pair("in-memory"),
    "svc-proxy pair, buffer in sqlite": await pair("sqlite"),
    ...(o.baseline
      ? {
          "svc-proxy pair, baseline": await pair("none", o.baseline),
          "svc-proxy pair, buffer in memory, baseline": await pair("in-memory", o.baseline),
        }
      : {}),
  };
  type Run = { acked: number[]; delivered: number[]; cpu: number[]; broker: number[]; load: number[] };
  const runs: Record<string, Run> = {};
  for (const [name, t] of Object.entries(targets)) {
    await mqttRate(t.port, 2000, arrivals); // warm-up
    runs[name] = { acked: [], delivered: [], cpu: [], broker: [], load: [] };
  }
  const ownUs = () => {
    const u = process.cpuUsage();
    return u.user + u.system;
  };
  for (let r = 0; r < rounds; r++)
    for (const [name, t] of Object.entries(targets)) {
      const before = t.procs.map((p) => cpuUs(p.pid));
      const [broker0, load0] = [cpuUs(broker.pid), ownUs()];
      const { acked, delivered } = await mqttRate(t.port, messages, arrivals);
      const cpu = t.procs.reduce((sum, p, i) => sum + cpuUs(p.pid) - (before[i] as number), 0) / messages;
      const run = runs[name] as Run;
      run.acked.push(acked);
      run.delivered.push(delivered);
      run.cpu.push(cpu);
      run.broker.push((cpuUs(broker.pid) - broker0) / messages);
      run.load.push((ownUs() - load0) / messages);
      process.stderr.write(
        `round ${r + 1} ${name}: ${acked.toFixed(0)} acknowledged/s, ${delivered.toFixed(0)} delivered/s, ${cpu.toFixed(1)} µs CPU/msg\n`,
      );
    }
  const rate = (k: string, of: "acked" | "delivered" = "acked") => median(runs[k]?.[of] ?? [0]);
  const lines = [
    `# MQTT through proxy pairs (bench/mqtt.ts, ${new Date().toISOString().slice(0, 10)})`,
    "",
    `${messages} QoS 1 PUBLISH of 64 bytes from mqtt.js, ${o.inflight} in flight, MQTT 5, to mosquitto, which passes them to one QoS 0 subscriber. The ghostunnel pair relays the bytes over SPIFFE mTLS as the unbuffered svc-proxy pair does. Loopback, 2 cores shared by all processes. Medians of ${rounds} rounds (every path once per round, alternating), range over rounds in brackets. Acknowledged: PUBACKs to the publisher per second; delivered: messages per second until the subscriber had them all (a buffer acknowledges first). CPU: both proxies' user + system time per message, delivery included.`,
    "",
    "| path | acknowledged/s | × direct | delivered/s | × direct | CPU µs/message |",
    "|---|---:|---:|---:|---:|---:|",
    ...Object.entries(runs).map(
      ([k, v]) =>
        `| ${k} | ${rate(k).toFixed(0)} (${range(v.acked, 0)}) | ${ratio(rate(k), rate("direct to mosquitto"))} | ${rate(k, "delivered").toFixed(0)} (${range(v.delivered, 0)}) | ${ratio(rate(k, "delivered"), rate("direct to mosquitto", "delivered"))} | ${k.startsWith("direct") ? "–" : `${median(v.cpu).toFixed(1)} (${range(v.cpu, 1)})`} |`,
    ),
    "",
    "CPU time per message of every process (medians, µs): the proxies, mosquitto, and the load generator (this benchmark's process: the mqtt.js publisher and subscriber). Two cores give 2,000,000 µs of CPU a second, so no path can carry more than 2,000,000 ÷ its total messages a second (the ceiling). The per-message costs of all processes rise as a path slows: fewer messages arrive per read and per wake-up.",
    "",
    "| path | proxies | mosquitto | load generator | all | all ÷ direct's | ceiling, messages/s |",
    "|---|---:|---:|---:|---:|---:|---:|",
    ...Object.entries(runs).map(([k, v]) => {
      const all = (x: Run) => median(x.cpu) + median(x.broker) + median(x.load);
      const direct = runs["direct to mosquitto"] as Run;
      return `| ${k} | ${median(v.cpu).toFixed(1)} | ${median(v.broker).toFixed(1)} | ${median(v.load).toFixed(1)} | ${all(v).toFixed(1)} | ${ratio(all(v), all(direct))} | ${(2e6 / all(v)).toFixed(0)} |`;
    }),
    "",
    `The unbuffered svc-proxy pair against the ghostunnel pair: ${ratio(rate("svc-proxy pair"), rate("ghostunnel pair"))}×. The sqlite buffer against the in-memory one: ${ratio(rate("svc-proxy pair, buffer in sqlite"), rate("svc-proxy pair, buffer in memory"))}×.`,
    "",
  ];
  report(lines, o.out);
} finally {
  await run.stop();
  process.exit(0);
}
