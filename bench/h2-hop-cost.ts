import { join } from "node:path";
import { parseArgs } from "node:util";
import { freePort, waitForPort } from "../tests/support/net.ts";
import { h2loadGrpc, UNARY, unaryRequest } from "./grpc-load.ts";
import { cpuUs, median, range } from "./stats.ts";
import { BenchRun, ROOT } from "./support.ts";

const { values: o } = parseArgs({
  options: {
    seconds: { type: "string", default: "3" },
    rounds: { type: "string", default: "4" },
    baseline: { type: "string" },
  },
});

const LOADS = [
  { name: "16 streams on 1 connection", args: ["-c", "1", "-m", "16"] },
  { name: "16 connections", args: ["-c", "16", "-m", "1", "-t", "2"] },
];

const run = new BenchRun();
try {
  const request = unaryRequest(run.dir);
  const upstreamPort = await freePort();
  run.start([process.execPath, join(ROOT, "bench/grpc-upstream.ts"), String(upstreamPort)]);
  await waitForPort(upstreamPort);
  await run.workloadApis(["client"]);
  const variants = await run.hopVariants(
    "bench/h2-hop-variants.ts",
    ["bytes", "framing", "headers"],
    upstreamPort,
  );
  const proxies: [string, string | undefined][] = [["svc-proxy HTTP/2 relay", undefined]];
  if (o.baseline) proxies.unshift([`svc-proxy HTTP/2 relay, baseline (${o.baseline})`, o.baseline]);
  for (const [name, binary] of proxies) {
    const port = await freePort();
    const listener = {
      name: "hop",
      address: `127.0.0.1:${port}`,
      mode: "client",
      connection: { http2: true },
      target: { url: `http://127.0.0.1:${upstreamPort}` },
    };
    variants.push([name, port, run.svcProxy("client", listener, undefined, binary)]);
  }
  for (const [, port] of variants) await waitForPort(port);

  const h2load = async (port: number, pid: number, args: string[]): Promise<number> => {
    const before = cpuUs(pid);
    const { succeeded } = await h2loadGrpc({ port, path: UNARY, args, seconds: o.seconds, request });
    return (cpuUs(pid) - before) / succeeded;
  };
  for (const load of LOADS) {
    const cpu = new Map<string, number[]>();
    for (const [, port, proc] of variants) await h2load(port, proc.pid, load.args); // warm-up
    for (let r = 0; r < Number(o.rounds); r++)
      for (const [name, port, proc] of variants) {
        const list = cpu.get(name) ?? [];
        list.push(await h2load(port, proc.pid, load.args));
        cpu.set(name, list);
      }
    console.log(`| hop (h2load unary, ${load.name}, ${o.rounds} rounds) | CPU µs/call |`);
    console.log("|---|---:|");
    for (const [name, xs] of cpu) console.log(`| ${name} | ${median(xs).toFixed(1)} (${range(xs, 1)}) |`);
    console.log("");
  }
} finally {
  await run.stop();
}
