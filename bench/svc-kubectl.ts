#!/usr/bin/env bun
/**
 * What svc adds to kubectl, side by side on the test bed (make testbed-up; make build):
 *   svc get pods          vs  kubectl get pods -L svc.io/compartment  (the same request and output)
 *   svc exec web-0        vs  kubectl exec web-0                       (svc's guard reads the pod first)
 *   svc identity          vs  kubectl auth whoami                      (the cluster call it makes)
 *   svc version           vs  kubectl version --client
 * and, in namespace shared holding --secrets Secrets of 1 KiB each (made once, marked ALPHA):
 *   svc get secret s-0 -o yaml   vs  kubectl get secret s-0 -o yaml    (svc lists the namespace's Secrets)
 *   svc delete secret s-0 --dry-run=server   vs  the same with kubectl  (svc looks the Secret up first)
 * svc learns the Secrets' compartments from a metadata list: --baseline with a build from before shows
 * what listing them whole cost.
 * Each pair runs alternately (kubectl, svc, kubectl, svc …) for --rounds rounds after a warm-up, so both
 * see the same machine. Reported: median wall time with the interquartile range, the ratio of medians,
 * and the median CPU time (user + system, the process and its children) — the steadier figure on a busy
 * machine.   bun bench/svc-kubectl.ts [--rounds 30] [--baseline path/to/svc] [--out bench/results/svc-kubectl.md]
 * --baseline runs another svc binary (an earlier build) as a third command of each round, so before and
 * after alternate in one run.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { readTestbed } from "../tests/e2e/testbed/index.ts";
import { median, medianIqr } from "./stats.ts";

const { values } = parseArgs({
  options: {
    rounds: { type: "string", default: "30" },
    secrets: { type: "string", default: "1000" },
    baseline: { type: "string" },
    out: { type: "string" },
  },
});
const rounds = Number(values.rounds);
const tb = readTestbed();
if (!tb) throw new Error("no test bed: run make testbed-up first");
const work = mkdtempSync(join(tmpdir(), "svc-bench-"));
const env = { ...process.env, SVC_CONFIG: join(work, "config.yaml"), KUBECONFIG: tb.kube.kubeconfig };
const svc = "dist/svc";

function run(cmd: string[]): { wallMs: number; cpuMs: number } {
  const t0 = performance.now();
  const r = Bun.spawnSync(cmd, { env, stdout: "ignore", stderr: "pipe" });
  const wallMs = performance.now() - t0;
  if (r.exitCode !== 0) throw new Error(`${cmd.join(" ")}: exit ${r.exitCode}: ${r.stderr.toString()}`);
  const cpu = r.resourceUsage?.cpuTime;
  return { wallMs, cpuMs: cpu ? Number(cpu.user + cpu.system) / 1000 : Number.NaN };
}

run([
  svc,
  "context",
  "create",
  "us-ts-alpha",
  "--country=US",
  "--sensitivity=TS",
  "--compartment=ALPHA",
  "--kube-context=testbed-alice",
  "--namespace=alpha",
]);
run([svc, "context", "use", "us-ts-alpha"]);
const admin = ["kubectl", "--context=testbed-admin", "-n", "alpha"];
run([...admin, "label", "--overwrite", "pod", "web-0", "svc.io/compartment=US-TS-ALPHA"]);

// The Secrets, made once (a List applied server-side in batches), and found again on a later run.
const secrets = Number(values.secrets);
const inShared = ["kubectl", "--context=testbed-admin", "-n", "shared"];
const have = Bun.spawnSync([...inShared, "get", "secrets", "-l", "svc-bench=secrets", "-o", "name"], { env })
  .stdout.toString()
  .split("\n")
  .filter(Boolean).length;
for (let from = have; from < secrets; from += 200) {
  const items = Array.from({ length: Math.min(200, secrets - from) }, (_, i) => ({
    apiVersion: "v1",
    kind: "Secret",
    metadata: {
      name: `s-${from + i}`,
      labels: { "svc-bench": "secrets", "svc.io/compartment": "US-TS-ALPHA" },
    },
    stringData: { value: "x".repeat(1024) },
  }));
  const r = Bun.spawnSync([...inShared, "apply", "--server-side", "-f", "-"], {
    env,
    stdin: Buffer.from(JSON.stringify({ apiVersion: "v1", kind: "List", items })),
    stdout: "ignore",
    stderr: "pipe",
  });
  if (r.exitCode !== 0) throw new Error(`making the Secrets: ${r.stderr.toString()}`);
}
const k = ["kubectl", "--context=testbed-alice", "--namespace=alpha"];
const ks = ["kubectl", "--context=testbed-alice", "--namespace=shared"];
/** svc in the ALPHA context, on namespace shared. */
const shared = (args: string[]) => [svc, "-n", "shared", ...args];
const pairs: [string, string[], string[]][] = [
  ["get pods", [...k, "get", "pods", "-L", "svc.io/compartment"], [svc, "get", "pods"]],
  [
    `get secret s-0 -o yaml (${secrets} Secrets)`,
    [...ks, "get", "secret", "s-0", "-o", "yaml"],
    shared(["get", "secret", "s-0", "-o", "yaml"]),
  ],
  [
    `delete secret s-0 --dry-run=server (${secrets} Secrets)`,
    [...ks, "delete", "secret", "s-0", "--dry-run=server"],
    shared(["delete", "secret", "s-0", "--dry-run=server"]),
  ],
  ["exec web-0 -- true", [...k, "exec", "web-0", "--", "true"], [svc, "exec", "web-0", "--", "true"]],
  ["identity / auth whoami", [...k, "auth", "whoami"], [svc, "identity"]],
  ["version", ["kubectl", "version", "--client"], [svc, "version"]],
];

const base = values.baseline;
const lines = [
  `| command | kubectl ms | svc ms | svc / kubectl | kubectl CPU ms | svc CPU ms |${base ? " baseline svc ms | baseline CPU ms |" : ""}`,
  `|---|---:|---:|---:|---:|---:|${base ? "---:|---:|" : ""}`,
];
const asBaseline = (cmd: string[]) => (base && cmd[0] === svc ? [base, ...cmd.slice(1)] : undefined);
try {
  for (const [name, plain, wrapped] of pairs) {
    for (let i = 0; i < 3; i++) {
      run(plain);
      run(wrapped);
    }
    const a = { wall: [] as number[], cpu: [] as number[] };
    const b = { wall: [] as number[], cpu: [] as number[] };
    const c = { wall: [] as number[], cpu: [] as number[] };
    const before = asBaseline(wrapped);
    for (let i = 0; i < rounds; i++) {
      const x = run(plain);
      const y = run(wrapped);
      a.wall.push(x.wallMs);
      a.cpu.push(x.cpuMs);
      b.wall.push(y.wallMs);
      b.cpu.push(y.cpuMs);
      if (before) {
        const z = run(before);
        c.wall.push(z.wallMs);
        c.cpu.push(z.cpuMs);
      }
    }
    lines.push(
      `| ${name} | ${medianIqr(a.wall)} | ${medianIqr(b.wall)} | **${(median(b.wall) / median(a.wall)).toFixed(2)}** | ${median(a.cpu).toFixed(1)} | ${median(b.cpu).toFixed(1)} |${before ? ` ${medianIqr(c.wall)} | ${median(c.cpu).toFixed(1)} |` : ""}`,
    );
    process.stderr.write(`${lines.at(-1)}\n`);
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}
const table = `${lines.join("\n")}\n`;
process.stdout.write(table);
if (values.out)
  writeFileSync(
    values.out,
    `# svc against kubectl (bun bench/svc-kubectl.ts --rounds ${rounds})\n\nMedians of ${rounds} alternating runs, interquartile range in brackets; CPU is user + system of the process and its children.\n\n${table}`,
  );
