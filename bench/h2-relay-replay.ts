/**
 * The HTTP/2 relay's own work per call, without the noise of sockets, TLS and the other processes on the
 * machine: a session is recorded once (h2load's unary gRPC calls, 16 streams on one connection, through a
 * recording byte relay to bench/grpc-upstream.ts), then replayed through proxy/http/h2relay/connection.ts
 * in this process, with stand-ins for its two sockets that take every write. Each replay is a new relay
 * connection fed the recorded chunks of both sides in the order they came.
 *
 * --hop client records what a caller sends (the client hop's input); --hop server records what a client
 * hop (dist/svc-proxy in client mode, its target the recorder) sends on, replayed with a verified peer as
 * the server hop sees it. With --baseline (another checkout of the repository, its node_modules
 * installed), that checkout's relay is replayed in turn with this one, round by round, in the same
 * process: reported are the CPU ns per call of both (median and range of the rounds after two warm-up
 * rounds) and the median of the per-round ratios.
 *
 *   bun bench/h2-relay-replay.ts [--hop client] [--calls 100000] [--rounds 12] [--baseline ../before]
 */
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import type { Socket } from "bun";
import { freePort, waitForPort } from "../tests/support/net.ts";
import { h2loadGrpc, UNARY, unaryRequest } from "./grpc-load.ts";
import { median, range } from "./stats.ts";
import { BenchRun, benchId, ROOT } from "./support.ts";

const { values: o } = parseArgs({
  options: {
    hop: { type: "string", default: "client" },
    calls: { type: "string", default: "100000" },
    rounds: { type: "string", default: "12" },
    baseline: { type: "string" },
  },
});
if (o.hop !== "client" && o.hop !== "server") throw new Error(`--hop ${o.hop}: client or server`);
const calls = Number(o.calls);

/** One chunk as a side received it: from the caller (0) or from the target (1). */
interface Chunk {
  from: 0 | 1;
  data: Uint8Array;
}

/** Records a session: a byte relay on `listen` to `target` that keeps every chunk of both sides in order. */
function recorder(listen: number, target: number): Chunk[] {
  const chunks: Chunk[] = [];
  type Side = { peer?: Socket<Side>; pending: Uint8Array[] };
  Bun.listen<Side>({
    hostname: "127.0.0.1",
    port: listen,
    socket: {
      open(caller) {
        caller.data = { pending: [] };
        Bun.connect<Side>({
          hostname: "127.0.0.1",
          port: target,
          socket: {
            open(t) {
              t.data = { peer: caller, pending: [] };
              caller.data.peer = t;
              for (const p of caller.data.pending) t.write(p);
            },
            data(t, chunk) {
              chunks.push({ from: 1, data: new Uint8Array(chunk) });
              t.data.peer?.write(chunk);
            },
            close() {
              caller.end();
            },
          },
        });
      },
      data(caller, chunk) {
        chunks.push({ from: 0, data: new Uint8Array(chunk) });
        if (caller.data.peer) caller.data.peer.write(chunk);
        else caller.data.pending.push(new Uint8Array(chunk));
      },
      close(caller) {
        caller.data.peer?.end();
      },
    },
  });
  return chunks;
}

/** A socket stand-in: takes every write whole. */
class Sink {
  bytes = 0;
  remoteAddress = "127.0.0.1";
  write(_data: Uint8Array, start = 0, length = _data.length - start): number {
    this.bytes += length;
    return length;
  }
  pause(): void {}
  resume(): void {}
  end(): void {}
  terminate(): void {}
}

type RelayClass = typeof import("../proxy/http/h2relay/connection.ts").H2Relay;

const run = new BenchRun();
let chunks: Chunk[] = [];
try {
  const upstream = await freePort();
  run.start([process.execPath, join(ROOT, "bench/grpc-upstream.ts"), String(upstream)]);
  await waitForPort(upstream);
  const recording = await freePort();
  chunks = recorder(recording, upstream);
  let port = recording;
  if (o.hop === "server") {
    await run.workloadApis(["client"]);
    port = await freePort();
    run.svcProxy("client", {
      name: "replay",
      address: `127.0.0.1:${port}`,
      mode: "client",
      connection: { http2: true },
      target: { url: `http://127.0.0.1:${recording}` },
    });
    await waitForPort(port);
  }
  const { succeeded } = await h2loadGrpc({
    port,
    path: UNARY,
    args: ["-c", "1", "-m", "16", "-n", String(calls)],
    request: unaryRequest(run.dir),
  });
  if (succeeded !== calls) throw new Error(`recording: ${succeeded} of ${calls} calls succeeded`);
} finally {
  await run.stop();
}

const log = (await import("../proxy/log.ts")).createLogger({ level: "error", encoder: "json" });
const peer =
  o.hop === "server"
    ? { id: { uri: benchId("client") }, notAfter: new Date(Date.now() + 3_600_000) }
    : undefined;

/** One replay through `Relay`: CPU ns per call, and the statuses the streams ended with. */
function replay(Relay: RelayClass): { ns: number; statuses: Map<number, number> } {
  const statuses = new Map<number, number>();
  const ctx = {
    target: {
      tls: false,
      connectOptions: () => ({}),
      check: () => ({ validUntil: Number.POSITIVE_INFINITY }),
    },
    targetUrl: new URL("http://127.0.0.1:1"),
    timeouts: { readMs: 60_000, writeMs: 60_000, idleMs: 60_000, handshakeMs: 10_000 },
    log,
    debug: false,
    events: {
      request: (status: number) => statuses.set(status, (statuses.get(status) ?? 0) + 1),
      denied() {},
      http2Ended() {},
      chatStream() {},
    },
    cancelled() {},
  };
  const caller = new Sink();
  const relay = new Relay(caller as unknown as Socket<unknown>, ctx as never, peer as never);
  // The target is the stand-in, open at once: the relay does not dial.
  (relay as unknown as { dial(): void }).dial = () => {};
  relay.targetOpened(new Sink() as unknown as Socket<never>);
  const before = process.cpuUsage();
  for (const c of chunks)
    if (c.from === 0) relay.received(c.data);
    else relay.targetData(c.data);
  const used = process.cpuUsage(before);
  relay.gone();
  return { ns: ((used.user + used.system) * 1000) / calls, statuses };
}

const setups: [string, RelayClass][] = [
  ["this checkout", (await import("../proxy/http/h2relay/connection.ts")).H2Relay],
];
if (o.baseline)
  setups.push([
    "baseline",
    (await import(resolve(o.baseline, "proxy/http/h2relay/connection.ts"))).H2Relay as RelayClass,
  ]);
const ns = setups.map(() => [] as number[]);
const rounds = Number(o.rounds);
for (let round = 0; round < rounds + 2; round++)
  for (const [i, [name, Relay]] of setups.entries()) {
    const r = replay(Relay);
    if (r.statuses.get(200) !== calls)
      throw new Error(`${name}: ${JSON.stringify([...r.statuses])} of ${calls} calls answered 200`);
    if (round >= 2) ns[i]?.push(r.ns);
  }
console.log(
  `${o.hop} hop, ${calls} calls of ${chunks.length} chunks, ${rounds} rounds: CPU ns per call, median (range)`,
);
for (const [i, [name]] of setups.entries()) {
  const xs = ns[i] as number[];
  console.log(`  ${name}: ${median(xs).toFixed(0)} (${range(xs, 0)})`);
}
if (o.baseline) {
  const ratios = (ns[0] as number[]).map((x, k) => x / ((ns[1] as number[])[k] as number));
  console.log(`  this checkout ÷ baseline, per round: ${median(ratios).toFixed(2)} (${range(ratios, 2)})`);
}
process.exit(0);
