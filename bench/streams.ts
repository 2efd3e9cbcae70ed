/**
 * TCP through a client→server proxy pair, against a direct connection and a ghostunnel pair, in the
 * same run with SVIDs from the same development Workload API:
 * - throughput: 512 MiB sent through and counted by a sink that answers with the count;
 * - new connections per second: connect, one byte each way, close; 8 at a time.
 * MQTT has its own benchmark, bench/mqtt.ts. Needs `make build` and ghostunnel
 * (`tests/e2e/build-peers.sh ghostunnel`); no other peer.
 *
 *   bun bench/streams.ts [--mib 512] [--connections 2000] [--rounds 5]
 *                        [--baseline path/to/svc-proxy] [--out bench/results/streams.md]
 *
 * --baseline adds a pair of another svc-proxy binary (an earlier build), so that before and after
 * alternate in one run.
 */
import { connect, createServer } from "node:net";
import { parseArgs } from "node:util";
import { freePort, waitForPort } from "../tests/support/net.ts";
import { median, range } from "./stats.ts";
import { BenchRun, report } from "./support.ts";

const { values: o } = parseArgs({
  options: {
    mib: { type: "string", default: "512" },
    connections: { type: "string", default: "2000" },
    rounds: { type: "string", default: "5" },
    baseline: { type: "string" },
    out: { type: "string" },
  },
});
/** Sends `bytes` and waits for the sink's count: MiB/s. */
function throughput(port: number, bytes: number): Promise<number> {
  const block = new Uint8Array(1 << 20);
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const s = connect({ port, host: "127.0.0.1", allowHalfOpen: true });
    let sent = 0;
    const pump = () => {
      while (sent < bytes) {
        sent += block.length;
        if (!s.write(block)) return void s.once("drain", pump);
      }
      s.end();
    };
    s.once("connect", pump);
    s.on("data", (d) => {
      if (Number(d.toString()) !== bytes) reject(new Error(`sink counted ${d}, sent ${bytes}`));
    });
    s.on("close", () => resolve(bytes / 1048576 / ((performance.now() - started) / 1000)));
    s.on("error", reject);
  });
}

/** `total` connections, `parallel` at a time, each one byte there and back: connections/s. */
async function connectionRate(port: number, total: number, parallel = 8): Promise<number> {
  const one = () =>
    new Promise<void>((resolve, reject) => {
      const s = connect(port, "127.0.0.1", () => s.write("x"));
      s.once("data", () => s.end());
      s.on("close", () => resolve());
      s.on("error", reject);
    });
  let left = total;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (left-- > 0) await one();
    }),
  );
  return total / ((performance.now() - started) / 1000);
}

const run = new BenchRun();
try {
  await run.workloadApis(["client", "server"]);
  // Sink: counts until the caller half-closes, answers with the count. Echo: answers each byte.
  const sink = createServer({ allowHalfOpen: true }, (s) => {
    let n = 0;
    s.on("data", (d) => {
      n += d.length;
    });
    s.on("end", () => s.end(String(n)));
  });
  const echo = createServer((s) => s.on("data", (d) => s.write(d)));
  for (const srv of [sink, echo]) await new Promise<void>((r) => srv.listen(0, "127.0.0.1", () => r()));
  const portOf = (srv: ReturnType<typeof createServer>) => (srv.address() as { port: number }).port;
  const svcPair = async (target: number, binary?: string) =>
    (await run.svcPair({ protocol: "tcp", target, ...(binary ? { binary } : {}) })).port;
  const ghPair = async (target: number) => {
    const [server, client] = [await freePort(), await freePort()];
    run.ghostunnel("server", "server", "client", server, target);
    run.ghostunnel("client", "client", "server", client, server);
    for (const p of [server, client]) await waitForPort(p);
    return client;
  };

  const bytes = Number(o.mib) * 1048576;
  const conns = Number(o.connections);
  const rounds = Number(o.rounds);
  // Every path once per round, in the same order, after a warm-up: A B C A B C …
  const tcpRuns: Record<string, { mibs: number[]; cps: number[] }> = {};
  const tcpTargets = {
    direct: { sink: portOf(sink), echo: portOf(echo) },
    "ghostunnel pair": { sink: await ghPair(portOf(sink)), echo: await ghPair(portOf(echo)) },
    "svc-proxy pair": { sink: await svcPair(portOf(sink)), echo: await svcPair(portOf(echo)) },
    ...(o.baseline
      ? {
          "svc-proxy pair, baseline": {
            sink: await svcPair(portOf(sink), o.baseline),
            echo: await svcPair(portOf(echo), o.baseline),
          },
        }
      : {}),
  };
  for (const [name, t] of Object.entries(tcpTargets)) {
    await throughput(t.sink, 32 * 1048576); // warm-up
    await connectionRate(t.echo, 200);
    tcpRuns[name] = { mibs: [], cps: [] };
  }
  for (let r = 0; r < rounds; r++)
    for (const [name, t] of Object.entries(tcpTargets)) {
      const mibs = await throughput(t.sink, bytes);
      const cps = await connectionRate(t.echo, conns);
      tcpRuns[name]?.mibs.push(mibs);
      tcpRuns[name]?.cps.push(cps);
      process.stderr.write(
        `round ${r + 1} tcp ${name}: ${mibs.toFixed(0)} MiB/s, ${cps.toFixed(0)} conn/s\n`,
      );
    }
  const tcp = Object.fromEntries(
    Object.entries(tcpRuns).map(([k, v]) => [k, { mibs: median(v.mibs), cps: median(v.cps) }]),
  );
  const ratio = (a: number | undefined, b: number | undefined) => ((a ?? 0) / (b ?? 1)).toFixed(2);
  const svc = tcp["svc-proxy pair"];
  const gh = tcp["ghostunnel pair"];
  const lines = [
    `# TCP through proxy pairs (bench/streams.ts, ${new Date().toISOString().slice(0, 10)})`,
    "",
    `TCP: ${o.mib} MiB one way; ${conns} connections, 8 at a time, one byte each way. Loopback, 2 cores shared by all processes. Medians of ${rounds} rounds (every path once per round, alternating), range over rounds in brackets.`,
    "",
    "| path | MiB/s | × direct | new connections/s | × direct |",
    "|---|---:|---:|---:|---:|",
    ...Object.entries(tcp).map(
      ([k, v]) =>
        `| ${k} | ${v.mibs.toFixed(0)} (${range(tcpRuns[k]?.mibs ?? [], 0)}) | ${ratio(v.mibs, tcp.direct?.mibs)} | ${v.cps.toFixed(0)} (${range(tcpRuns[k]?.cps ?? [], 0)}) | ${ratio(v.cps, tcp.direct?.cps)} |`,
    ),
    "",
    `svc-proxy pair vs ghostunnel pair: throughput ${ratio(svc?.mibs, gh?.mibs)}×, new connections ${ratio(svc?.cps, gh?.cps)}×.`,
    "",
  ];
  report(lines, o.out);
} finally {
  await run.stop();
  process.exit(0);
}
