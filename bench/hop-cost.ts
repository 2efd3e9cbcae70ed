/**
 * Where the CPU time of one HTTP hop goes: one plaintext client-mode hop in front of a Bun upstream,
 * as svc-proxy's relay listener and as bench/hop-variants.ts doing less and less of its work (bytes only,
 * plus framing, plus heads). Every variant is its own process; wrk drives each in turn, over --rounds
 * rounds; the figure is CPU µs (user + system) per request of the hop process, median and range.
 * Needs `make build` and wrk. `--baseline` adds another svc-proxy binary (an earlier build) as one more
 * variant, so that before and after are measured in one run, alternating.
 *
 *   bun bench/hop-cost.ts [--seconds 3] [--rounds 4] [--connections 16] [--body 256] [--post 0]
 *                         [--baseline path/to/svc-proxy]
 *
 * --body is the response body's size, --post the size of a request body (POST; 0: GET).
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { spawn } from "bun";
import { freePort, waitForPort } from "../tests/support/net.ts";
import { cpuUs, median, range } from "./stats.ts";
import { BenchRun } from "./support.ts";

const { values: o } = parseArgs({
  options: {
    seconds: { type: "string", default: "3" },
    rounds: { type: "string", default: "4" },
    connections: { type: "string", default: "16" },
    baseline: { type: "string" },
    body: { type: "string", default: "256" },
    post: { type: "string", default: "0" },
  },
});

const run = new BenchRun();
try {
  const upstreamPort = await freePort();
  const body = "x".repeat(Number(o.body));
  const post = Number(o.post);
  const upstream = Bun.serve({
    hostname: "127.0.0.1",
    port: upstreamPort,
    maxRequestBodySize: Math.max(post, 1024) * 2,
    fetch: async (req) => {
      if (req.body) await req.arrayBuffer();
      return new Response(body);
    },
  });
  const script = join(run.dir, "post.lua");
  if (post > 0) writeFileSync(script, `wrk.method = "POST"\nwrk.body = string.rep("x", ${post})\n`);
  await run.workloadApis(["client"]);
  const variants = await run.hopVariants(
    "bench/hop-variants.ts",
    ["bytes", "framing", "heads"],
    upstreamPort,
  );
  const proxies: [string, string | undefined][] = [["svc-proxy relay listener", undefined]];
  if (o.baseline) proxies.unshift([`svc-proxy relay listener, baseline (${o.baseline})`, o.baseline]);
  for (const [name, binary] of proxies) {
    const proxyPort = await freePort();
    const listener = {
      name: "hop",
      address: `127.0.0.1:${proxyPort}`,
      mode: "client",
      target: { url: `http://127.0.0.1:${upstreamPort}` },
    };
    variants.push([name, proxyPort, run.svcProxy("client", listener, undefined, binary)]);
  }
  for (const [, port] of variants) await waitForPort(port);

  const wrk = async (port: number, pid: number): Promise<number> => {
    const before = cpuUs(pid);
    const args = ["wrk", "-t2", `-c${o.connections}`, `-d${o.seconds}s`, ...(post > 0 ? ["-s", script] : [])];
    const p = spawn([...args, `http://127.0.0.1:${port}/`], { stdout: "pipe" });
    const out = await new Response(p.stdout).text();
    return (cpuUs(pid) - before) / Number(/(\d+) requests in/.exec(out)?.[1]);
  };
  const cpu = new Map<string, number[]>();
  for (const [, port, proc] of variants) await wrk(port, proc.pid); // warm-up
  for (let r = 0; r < Number(o.rounds); r++)
    for (const [name, port, proc] of variants) {
      const list = cpu.get(name) ?? [];
      list.push(await wrk(port, proc.pid));
      cpu.set(name, list);
    }
  const what = `${post > 0 ? `POST ${post} B, ` : ""}${o.body} B responses`;
  console.log(`| hop (wrk, ${o.connections} connections, ${o.rounds} rounds, ${what}) | CPU µs/request |`);
  console.log("|---|---:|");
  for (const [name, xs] of cpu) console.log(`| ${name} | ${median(xs).toFixed(1)} (${range(xs, 1)}) |`);
  upstream.stop(true);
} finally {
  await run.stop();
}
