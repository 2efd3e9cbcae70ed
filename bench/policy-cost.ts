#!/usr/bin/env bun
/**
 * What the compartment policy (deploy/admission/base/policy.yaml) adds to each write the API server takes
 * (make testbed-up): alice, cleared for US-TS-ALPHA, sends --requests writes a round over one keep-alive
 * HTTPS connection pool, --concurrency at a time, straight to the test bed's kube-apiserver: a mix of
 * creates (a marked ConfigMap and a marked, pinned Deployment), updates (a label patch of each), dry-run
 * deletes and one delete refused across compartments in ten. All are dry runs (the policy runs on dry
 * runs; nothing is stored), so a round leaves nothing behind. The Deployment creates are also sent to the
 * webhook (its references entry), in both setups alike: what differs is the policy alone.
 * Setups alternate round by round: the policy bound (as shipped) and unbound (its binding deleted, the
 * policy kept). Reported: median and p99 latency per setup (the spread over rounds), and the API
 * server's CPU time per request (from /proc, user + system), the figure that holds on a busy machine.
 * --requesters names who sends the writes, each in every round: alice (a client certificate, her groups
 * clear her), and account, a service account marked for US-TS-ALPHA with a token, for which the policy
 * asks the authorization webhook which compartment it speaks for (its answer kept by the API server for
 * 5 s); that figure includes the question. The answers each setup got are reported with the times.
 *   bun bench/policy-cost.ts [--requests 2000] [--concurrency 8] [--rounds 4] [--requesters alice,account] [--out FILE]
 */
import { readFileSync, writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { stringify } from "yaml";
import { resolveKubeconfig } from "../lib/kube/kubeconfig.ts";
import { COMPARTMENT_LABEL as PIN } from "../lib/kube/mls.ts";
import { kubectlAs, readTestbed } from "../tests/e2e/testbed/index.ts";
import { cpuUs, median, quantile, range } from "./stats.ts";

const { values } = parseArgs({
  options: {
    requests: { type: "string", default: "2000" },
    concurrency: { type: "string", default: "8" },
    rounds: { type: "string", default: "4" },
    requesters: { type: "string", default: "alice" },
    out: { type: "string" },
  },
});
const requests = Number(values.requests);
const concurrency = Number(values.concurrency);
const rounds = Number(values.rounds);
const requesters = values.requesters.split(",");
for (const r of requesters)
  if (r !== "alice" && r !== "account") throw new Error(`--requesters: ${r}: expected alice or account`);
const tb = readTestbed();
if (!tb) throw new Error("no test bed: run make testbed-up first");
const apiserverPid = tb.kube.pids.apiserver as number;

const kubectl = kubectlAs(tb, "admin");

/** alice's client certificate and the cluster's address and CA, from the test bed's kubeconfig. */
const resolved = resolveKubeconfig(
  new Map([
    ["kubeconfig", [tb.kube.kubeconfig]],
    ["context", [tb.kube.users.alice.context]],
  ]),
);
if (!("ok" in resolved)) throw new Error(`the test bed's kubeconfig: ${resolved.unsupported}`);
const { server, ca, cert, key } = resolved.ok;

const NS = "alpha";
const ALPHA = "US-TS-ALPHA";
const configMap = (name: string) => ({
  apiVersion: "v1",
  kind: "ConfigMap",
  metadata: { name, namespace: NS, labels: { [PIN]: ALPHA } },
  data: { k: "v" },
});
const deployment = (name: string) => ({
  apiVersion: "apps/v1",
  kind: "Deployment",
  metadata: { name, namespace: NS, labels: { [PIN]: ALPHA } },
  spec: {
    replicas: 0,
    selector: { matchLabels: { app: name, [PIN]: ALPHA } },
    template: {
      metadata: { labels: { app: name, [PIN]: ALPHA } },
      spec: { containers: [{ name: "main", image: "busybox" }] },
    },
  },
});

const cm = `/api/v1/namespaces/${NS}/configmaps`;
const deploy = `/apis/apps/v1/namespaces/${NS}/deployments`;
const patch = JSON.stringify({ metadata: { labels: { tier: "bench" } } });
/** The ten requests of the mix; the last is refused (a BRAVO object) with the policy bound. */
const MIX: { method: string; path: string; body?: string; type?: string }[] = [
  { method: "POST", path: cm, body: JSON.stringify(configMap("bench-new")) },
  { method: "POST", path: deploy, body: JSON.stringify(deployment("bench-new")) },
  { method: "PATCH", path: `${cm}/bench-alpha`, body: patch, type: "application/merge-patch+json" },
  { method: "PATCH", path: `${deploy}/bench-alpha`, body: patch, type: "application/merge-patch+json" },
  { method: "DELETE", path: `${cm}/bench-alpha` },
  { method: "DELETE", path: `${deploy}/bench-alpha` },
  { method: "POST", path: cm, body: JSON.stringify(configMap("bench-new-2")) },
  { method: "PATCH", path: `${cm}/bench-alpha`, body: patch, type: "application/merge-patch+json" },
  { method: "DELETE", path: `${cm}/bench-alpha` },
  { method: "DELETE", path: `${cm}/bench-bravo` },
];

const ACCOUNT = "bench-writer";
interface Credentials {
  headers: Record<string, string>;
  tls: { ca?: string; cert?: string; key?: string };
}
/** Each requester's credentials: alice's from the kubeconfig, the account's once its token is made. */
const credentials: Record<string, Credentials> = { alice: { headers: {}, tls: { ca, cert, key } } };

async function send(i: number, as: Credentials): Promise<{ ms: number; status: number }> {
  const m = MIX[i % MIX.length] as (typeof MIX)[number];
  const started = performance.now();
  const r = await fetch(`${server}${m.path}?dryRun=All`, {
    method: m.method,
    ...(m.body ? { body: m.body } : {}),
    headers: {
      "content-type": m.type ?? "application/json",
      accept: "application/json",
      ...as.headers,
    },
    tls: as.tls,
  });
  await r.arrayBuffer();
  return { ms: performance.now() - started, status: r.status };
}

async function round(as: Credentials) {
  const cpu0 = cpuUs(apiserverPid);
  const times: number[] = [];
  const statuses: Record<number, number> = {};
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < requests) {
        const x = await send(next++, as);
        times.push(x.ms);
        statuses[x.status] = (statuses[x.status] ?? 0) + 1;
      }
    }),
  );
  return {
    p50: median(times),
    p99: quantile(times, 0.99),
    cpuUsPerRequest: (cpuUs(apiserverPid) - cpu0) / requests,
    statuses,
  };
}

const binding = readFileSync(new URL("../deploy/admission/base/policy.yaml", import.meta.url), "utf8")
  .split("\n---\n")
  .find((d) => d.includes("kind: ValidatingAdmissionPolicyBinding")) as string;
const bind = () => kubectl(["apply", "-f", "-"], binding);
const unbind = () =>
  kubectl(["delete", "validatingadmissionpolicybinding", "svc-compartments", "--ignore-not-found"]);

try {
  for (const [name, c] of [
    ["bench-alpha", ALPHA],
    ["bench-bravo", "UK-S-BRAVO"],
  ] as const)
    kubectl(
      ["apply", "-f", "-"],
      stringify({ ...configMap(name), metadata: { name, namespace: NS, labels: { [PIN]: c } } }),
    );
  kubectl(["apply", "-f", "-"], stringify(deployment("bench-alpha")));
  if (requesters.includes("account")) {
    // The account and its binding in one apply.
    const metadata = { name: ACCOUNT, namespace: NS, labels: { [PIN]: ALPHA } };
    kubectl(
      ["apply", "-f", "-"],
      [
        { apiVersion: "v1", kind: "ServiceAccount", metadata },
        {
          apiVersion: "rbac.authorization.k8s.io/v1",
          kind: "RoleBinding",
          metadata,
          roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "edit" },
          subjects: [{ kind: "ServiceAccount", name: ACCOUNT, namespace: NS }],
        },
      ]
        .map((o) => stringify(o))
        .join("---\n"),
    );
    const token = kubectl(["create", "token", ACCOUNT, "-n", NS, "--duration=1h"]).trim();
    credentials.account = { headers: { authorization: `Bearer ${token}` }, tls: { ca } };
  }
  const states: [string, () => void][] = [
    ["policy bound", bind],
    ["policy unbound", unbind],
  ];
  const setup = (requester: string, state: string) => `${requester}, ${state}`;
  const results: Record<string, Awaited<ReturnType<typeof round>>[]> = Object.fromEntries(
    requesters.flatMap((q) => states.map(([state]) => [setup(q, state), []])),
  );
  for (let r = 0; r < rounds; r++)
    for (const [state, set] of states) {
      set();
      // The API server picks a binding up from its informer: a warm-up round after each change, discarded.
      await round(credentials[requesters[0] as string] as Credentials);
      for (const q of requesters) {
        const x = await round(credentials[q] as Credentials);
        results[setup(q, state)]?.push(x);
        process.stderr.write(
          `round ${r + 1} ${setup(q, state)}: p50 ${x.p50.toFixed(2)} ms, p99 ${x.p99.toFixed(2)} ms, apiserver CPU ${x.cpuUsPerRequest.toFixed(0)} µs/request, statuses ${JSON.stringify(x.statuses)}\n`,
        );
      }
    }
  const cpu = (name: string) => median((results[name] ?? []).map((x) => x.cpuUsPerRequest));
  /** Every answer a setup got over its rounds, by HTTP status. */
  const answers = (xs: Awaited<ReturnType<typeof round>>[]) => {
    const total: Record<string, number> = {};
    for (const x of xs) for (const [k, n] of Object.entries(x.statuses)) total[k] = (total[k] ?? 0) + n;
    return Object.entries(total)
      .map(([k, n]) => `${k}: ${n}`)
      .join(", ");
  };
  const lines = [
    "| setup | p50 ms | p99 ms (range over rounds) | apiserver CPU µs / request (range) | answers (all rounds) |",
    "|---|---:|---:|---:|---|",
    ...Object.entries(results).map(
      ([name, xs]) =>
        `| ${name} | ${median(xs.map((x) => x.p50)).toFixed(2)} | ${median(xs.map((x) => x.p99)).toFixed(2)} (${range(
          xs.map((x) => x.p99),
          2,
        )}) | ${cpu(name).toFixed(0)} (${range(
          xs.map((x) => x.cpuUsPerRequest),
          0,
        )}) | ${answers(xs)} |`,
    ),
  ];
  const costs = requesters
    .map(
      (q) =>
        `The policy's cost for ${q}'s writes: ${(cpu(setup(q, "policy bound")) - cpu(setup(q, "policy unbound"))).toFixed(0)} µs of API server CPU per write (medians).`,
    )
    .join("\n");
  const table = `${lines.join("\n")}\n\n${costs}\n`;
  process.stdout.write(table);
  if (values.out)
    writeFileSync(
      values.out,
      `# What the compartment policy costs the API server (bun bench/policy-cost.ts --requests ${requests} --concurrency ${concurrency} --rounds ${rounds} --requesters ${requesters.join(",")})\n\n${requesters.map((q) => (q === "alice" ? "alice's (a client certificate)" : `a service account's (${ACCOUNT}, marked for ${ALPHA}, with a token)`)).join(" and ")} dry-run writes straight to the test bed's kube-apiserver, ${concurrency} at a time, ${requests} a round: creates, label patches and deletes of a marked ConfigMap and Deployment, and one delete in ten of another compartment's ConfigMap (refused with the policy bound). ${rounds} rounds alternating the policy bound and unbound, each after a discarded warm-up round, every requester in each; medians over rounds.\n\n${table}`,
    );
} finally {
  bind();
  kubectl(["delete", "configmap", "bench-alpha", "bench-bravo", "-n", NS, "--ignore-not-found"]);
  kubectl(["delete", "deployment", "bench-alpha", "-n", NS, "--ignore-not-found"]);
  if (requesters.includes("account"))
    kubectl(["delete", "serviceaccount,rolebinding", ACCOUNT, "-n", NS, "--ignore-not-found"]);
}
