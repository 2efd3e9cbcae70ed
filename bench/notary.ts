/**
 * Added latency of notarization per level: the same client→server proxy chain (openai middleware, SPIRE
 * pod identities) without the notary and with it at workload, logRequest and signRequest. Sequential
 * requests on one keep-alive connection; p50 and p99 per setup, and the difference to the chain without
 * the notary. Needs the test bed (`make testbed-up`).
 *
 *   bun bench/notary.ts [--requests 2000] [--out bench/results/notary.md]
 */
import { chownSync, copyFileSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { type Subprocess, spawn } from "bun";
import { readTestbed } from "../tests/e2e/testbed/index.ts";
import { asWorkload } from "../tests/e2e/testbed/spire.ts";
import { freePort, waitForPort } from "../tests/support/net.ts";

const { values: o } = parseArgs({
  options: { requests: { type: "string", default: "2000" }, out: { type: "string" } },
});
const N = Number(o.requests);
const ROOT = new URL("..", import.meta.url).pathname;
const tb = readTestbed();
if (!tb) throw new Error("the test bed is not running: make testbed-up");
const [web, api] = [tb.spire.workloads.web, tb.spire.workloads.api];
if (!web || !api) throw new Error("test bed workloads web and api missing");
const procs: Subprocess[] = [];
const work = join(tb.dir, "home", "bench-notary");
rmSync(work, { recursive: true, force: true });
mkdirSync(work, { recursive: true });
chownSync(work, web.uid, web.uid);
copyFileSync(tb.kube.kubeconfig, join(work, "kubeconfig"));
chownSync(join(work, "kubeconfig"), web.uid, web.uid);

const completion = JSON.stringify({
  id: "c",
  object: "chat.completion",
  created: 1,
  model: "m",
  choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content: "x".repeat(200) } }],
  usage: { prompt_tokens: 10, completion_tokens: 50, total_tokens: 60 },
});
const upstream = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch: () => new Response(completion, { headers: { "content-type": "application/json" } }),
});
const socket = `unix://${tb.spire.agentSocket}`;
const proxy = (w: typeof web, config: object) => {
  const p = spawn(asWorkload(w, [process.execPath, join(ROOT, "cmd/svc-proxy.ts"), "-zap-log-level=error"]), {
    cwd: ROOT,
    env: {
      ...process.env,
      KUBECONFIG: join(work, "kubeconfig"),
      SVC_PROXY_CONFIG: JSON.stringify({
        spiffe: { workload_socket_path: socket },
        metricsAddr: "0",
        ...config,
      }),
    },
    stdout: "ignore",
    stderr: "inherit",
  });
  procs.push(p);
};
const [serverPort, plainPort, notaryPort] = [await freePort(), await freePort(), await freePort()];
const client = (port: number, notary: boolean) =>
  proxy(web, {
    ...(notary ? { notary: { enable: true, database: { path: join(work, "notary.db") } } } : {}),
    listeners: [
      {
        name: "c",
        address: `127.0.0.1:${port}`,
        mode: "client",
        target: { url: `https://127.0.0.1:${serverPort}` },
        middlewares: [{ type: "openai" }],
      },
    ],
  });
try {
  proxy(api, {
    listeners: [
      {
        name: "s",
        address: `127.0.0.1:${serverPort}`,
        mode: "server",
        target: { url: `http://127.0.0.1:${upstream.port}` },
      },
    ],
  });
  client(plainPort, false);
  client(notaryPort, true);
  for (const p of [serverPort, plainPort, notaryPort]) await waitForPort(p, 60_000);

  const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: "hello" }] });
  const measure = async (port: number, level?: string) => {
    const call = () =>
      fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          ...(level ? { "svc-notarization-level": level } : {}),
        },
        body,
      }).then(async (r) => {
        await r.arrayBuffer();
        if (r.status !== 200) throw new Error(`status ${r.status}`);
        if (level && !r.headers.get("svc-workload-id")) throw new Error("no statement");
      });
    for (let i = 0; i < 200; i++) await call(); // warm-up (and the first statement)
    const ms: number[] = [];
    for (let i = 0; i < N; i++) {
      const t = performance.now();
      await call();
      ms.push(performance.now() - t);
    }
    ms.sort((a, b) => a - b);
    const q = (p: number) => ms[Math.min(ms.length - 1, Math.floor(p * ms.length))] as number;
    return { p50: q(0.5), p99: q(0.99) };
  };
  const rows: [string, { p50: number; p99: number }][] = [];
  rows.push(["without the notary", await measure(plainPort)]);
  for (const level of ["workload", "logRequest", "signRequest"])
    rows.push([`notary, ${level}`, await measure(notaryPort, level)]);
  const base = rows[0]?.[1] as { p50: number; p99: number };
  const lines = [
    "# Notarization latency (bench/notary.ts)",
    "",
    `${new Date().toISOString().slice(0, 10)}; client proxy (openai middleware) → server proxy → Bun upstream, SPIRE pod identities from the test bed; ${N} sequential requests on one keep-alive connection per setup after 200 warm-up requests.`,
    "",
    "| setup | p50 ms | p99 ms | added p50 ms | added p99 ms |",
    "|---|---:|---:|---:|---:|",
    ...rows.map(
      ([name, r]) =>
        `| ${name} | ${r.p50.toFixed(3)} | ${r.p99.toFixed(3)} | ${name === "without the notary" ? "" : (r.p50 - base.p50).toFixed(3)} | ${name === "without the notary" ? "" : (r.p99 - base.p99).toFixed(3)} |`,
    ),
  ];
  const report = `${lines.join("\n")}\n`;
  process.stdout.write(report);
  if (o.out) await Bun.write(o.out, report);
} finally {
  for (const p of procs) p.kill("SIGTERM");
  await Promise.all(procs.map((p) => p.exited));
  upstream.stop(true);
}
