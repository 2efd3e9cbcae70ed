#!/usr/bin/env bun
/**
 * What @kubernetes/client-node costs a process, measured on the test bed (make testbed-up): two programs
 * compiled with the release flags each read one pod and exit —
 *   client-node:  lib/kube/client.ts (client-node's KubeConfig and CoreV1Api over Bun's fetch)
 *   hand-written: lib/kube/kubeconfig.ts + lib/kube/pods.ts (svc's own kubeconfig reader and one GET)
 * run alternately for --rounds rounds. Reported: median wall time to the answer (with the interquartile
 * range), median CPU time, the resident memory at the answer, and the executable's size.
 *   bun bench/kube-client.ts [--rounds 20] [--out bench/results/kube-client.md]
 */
import { mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { readTestbed } from "../tests/e2e/testbed/index.ts";
import { median, medianIqr } from "./stats.ts";

const { values } = parseArgs({
  options: { rounds: { type: "string", default: "20" }, out: { type: "string" } },
});
const rounds = Number(values.rounds);
const tb = readTestbed();
if (!tb) throw new Error("no test bed: run make testbed-up first");
const ROOT = new URL("..", import.meta.url).pathname;
const work = mkdtempSync(join(tmpdir(), "svc-bench-kube-"));
const rss = `Number(require("node:fs").readFileSync("/proc/self/status", "utf8").match(/VmRSS:\\s+(\\d+)/)[1]) / 1024`;
const programs = {
  "client-node": `import { openKubeClient } from "${ROOT}lib/kube/client.ts";
const pod = await openKubeClient().core.readNamespacedPod({ namespace: "alpha", name: "web-0" });
console.log(JSON.stringify({ uid: pod.metadata?.uid, rssMb: ${rss} }));`,
  "hand-written": `import { resolveKubeconfig } from "${ROOT}lib/kube/kubeconfig.ts";
import { getPod } from "${ROOT}lib/kube/pods.ts";
const r = resolveKubeconfig(new Map(), process.env);
if (!("ok" in r)) throw new Error(r.unsupported);
const pod = await getPod(r.ok, "alpha", "web-0");
console.log(JSON.stringify({ uid: pod?.metadata.uid, rssMb: ${rss} }));`,
};
const bun = process.execPath;
const env = { ...process.env, KUBECONFIG: tb.kube.kubeconfig };
for (const [name, text] of Object.entries(programs)) {
  writeFileSync(join(work, `${name}.ts`), text);
  const b = Bun.spawnSync(
    [
      bun,
      "build",
      "--compile",
      "--minify",
      "--bytecode",
      "--format=esm",
      join(work, `${name}.ts`),
      "--outfile",
      join(work, name),
    ],
    { stdout: "ignore", stderr: "pipe" },
  );
  if (b.exitCode !== 0) throw new Error(`build ${name}: ${b.stderr}`);
}

function run(name: string) {
  const t0 = performance.now();
  const r = Bun.spawnSync([join(work, name)], { env, stdout: "pipe", stderr: "pipe" });
  const wallMs = performance.now() - t0;
  if (r.exitCode !== 0) throw new Error(`${name}: ${r.stderr.toString()}`);
  const out = JSON.parse(r.stdout.toString()) as { uid?: string; rssMb: number };
  if (!out.uid) throw new Error(`${name}: no pod read`);
  const cpu = r.resourceUsage?.cpuTime;
  return { wallMs, cpuMs: cpu ? Number(cpu.user + cpu.system) / 1000 : Number.NaN, rssMb: out.rssMb };
}

try {
  const names = Object.keys(programs);
  const got: Record<string, { wall: number[]; cpu: number[]; rss: number[] }> = {};
  for (const n of names) got[n] = { wall: [], cpu: [], rss: [] };
  for (let i = 0; i < 3; i++) for (const n of names) run(n);
  for (let i = 0; i < rounds; i++)
    for (const n of names) {
      const r = run(n);
      got[n]?.wall.push(r.wallMs);
      got[n]?.cpu.push(r.cpuMs);
      got[n]?.rss.push(r.rssMb);
    }
  const lines = [
    "| program | wall ms to the pod | CPU ms | resident MB at the answer | executable MB |",
    "|---|---:|---:|---:|---:|",
    ...names.map((n) => {
      const g = got[n] as { wall: number[]; cpu: number[]; rss: number[] };
      const size = statSync(join(work, n)).size / 1e6;
      return `| ${n} | ${medianIqr(g.wall)} | ${median(g.cpu).toFixed(1)} | ${median(g.rss).toFixed(1)} | ${size.toFixed(1)} |`;
    }),
  ];
  const table = `${lines.join("\n")}\n`;
  process.stdout.write(table);
  if (values.out)
    writeFileSync(
      values.out,
      `# @kubernetes/client-node against svc's own reader (bun bench/kube-client.ts --rounds ${rounds})\n\nMedians of ${rounds} alternating runs, interquartile range in brackets; each program reads one pod from the test bed's kube-apiserver and exits. CPU is user + system.\n\n${table}`,
    );
} finally {
  rmSync(work, { recursive: true, force: true });
}
