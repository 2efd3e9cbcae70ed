#!/usr/bin/env bun
/**
 * The admission webhook under load (make testbed-up; make build): dist/svc-proxy serving only the webhook,
 * its pod cache filled from the test bed's kube-apiserver with --pods labelled pods, takes CONNECT
 * pods/exec reviews at a fixed --rate over keep-alive HTTPS, as the API server sends them, from vegeta
 * (a constant-rate load generator in Go: GOBIN=~/.cache/svc-tools/bin go install
 * github.com/tsenart/vegeta/v12@v12.13.0). The mix: 9 in 10 allowed (the requester's compartment), 1 in
 * 10 refused (another); the answers are checked once before the load.
 * Alternated with a floor: a Bun.serve on the same TLS that answers every review "allowed" without
 * reading it — what the transport alone costs on this machine.
 * With --review access, the authorization webhook instead (POST /authorize): SubjectAccessReviews of
 * `get` on --pods labelled Secrets, as the API server sends them, the same mix (9 in 10 get no opinion,
 * 1 in 10 is denied).
 * With --review mix, the reviews the webhook decides by default, in one cycle of ten: exec into a pod
 * (two), the service proxy, and dry-run creates of what names another object or gains an owner: an
 * autoscaler (its Deployment read from the API server), an Ingress (its Service from the cache), a claim
 * bound by name (its PersistentVolume read), a ConfigMap owned by a Deployment (read), a pod asking for a
 * priority class (read), an Event about a pod (cache); the tenth, exec into another compartment's pod, is
 * refused. (Deletes and other writes of objects are the policy's, inside the API server:
 * bench/policy-cost.ts.)
 * Reported per setup: reviews sent and answered, median and p99 latency (with the spread over rounds),
 * and the server's CPU time per review (from /proc, user + system).
 * With --baseline PATH, a third setup: another svc-proxy build (the build before a change) serving the
 * same webhook, alternated with the others.
 *   bun bench/admission.ts [--review exec|access|mix] [--rate 1000] [--seconds 10] [--rounds 4] [--pods 300] [--baseline PATH] [--out bench/results/admission.md]
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { parseArgs } from "node:util";
import { stringify } from "yaml";
import { kubectlAs, readTestbed } from "../tests/e2e/testbed/index.ts";
import { freePort } from "../tests/support/net.ts";
import { waitUntil } from "../tests/support/wait.ts";
import { cpuUs, median, range } from "./stats.ts";
import { BenchRun, ROOT } from "./support.ts";

const { values } = parseArgs({
  options: {
    review: { type: "string", default: "exec" },
    rate: { type: "string", default: "1000" },
    seconds: { type: "string", default: "10" },
    rounds: { type: "string", default: "4" },
    pods: { type: "string", default: "300" },
    out: { type: "string" },
    baseline: { type: "string" },
  },
});
const rate = Number(values.rate);
const seconds = Number(values.seconds);
const rounds = Number(values.rounds);
const podCount = Number(values.pods);
const access = values.review === "access";
const mix = values.review === "mix";
if (!access && !mix && values.review !== "exec")
  throw new Error(`--review ${values.review}: expected exec, access or mix`);
const tb = readTestbed();
if (!tb) throw new Error("no test bed: run make testbed-up first");

const bench = new BenchRun();
const admin = kubectlAs(tb, "admin");

const NS = "bench-admission";
const caFile = join(tb.dir, "ca.pem");
const ca = readFileSync(caFile, "utf8");
const home = join(tb.dir, "admission");
const tls = {
  cert: readFileSync(join(home, "tls.crt"), "utf8"),
  key: readFileSync(join(home, "tls.key"), "utf8"),
};

const ALPHA = ["svc:country:us", "svc:sensitivity:ts", "svc:compartment:alpha", "system:authenticated"];
// Even objects are ALPHA, odd ones BRAVO: every tenth review goes to a BRAVO one.
const target = (i: number) => 2 * (i % (podCount / 2)) + (i % 10 === 9 ? 1 : 0);
const accessReview = (i: number) =>
  JSON.stringify({
    apiVersion: "authorization.k8s.io/v1",
    kind: "SubjectAccessReview",
    spec: {
      resourceAttributes: {
        namespace: NS,
        verb: "get",
        version: "v1",
        resource: "secrets",
        name: `secret-${target(i)}`,
      },
      user: "alice",
      groups: ALPHA,
    },
  });
const alice = { username: "alice", groups: ALPHA };
const ALPHA_LABEL = { "svc.io/compartment": "US-TS-ALPHA" };
/** An AdmissionReview of a dry-run create of `object` (resource group/version/resource). */
const createReview = (
  i: number,
  group: string,
  version: string,
  resource: string,
  kind: string,
  object: object,
) =>
  JSON.stringify({
    apiVersion: "admission.k8s.io/v1",
    kind: "AdmissionReview",
    request: {
      uid: `bench-${i}`,
      kind: { group, version, kind },
      resource: { group, version, resource },
      namespace: NS,
      name: `bench-${i}`,
      operation: "CREATE",
      dryRun: true,
      userInfo: alice,
      object: { apiVersion: group ? `${group}/${version}` : version, kind, ...object },
    },
  });
const meta = (i: number, extra: object = {}) => ({
  metadata: { name: `bench-${i}`, namespace: NS, labels: ALPHA_LABEL, ...extra },
});
const connect = (i: number, resource: string, subResource: string, name: string) =>
  JSON.stringify({
    apiVersion: "admission.k8s.io/v1",
    kind: "AdmissionReview",
    request: {
      uid: `bench-${i}`,
      kind: { group: "", version: "v1", kind: "PodExecOptions" },
      resource: { group: "", version: "v1", resource },
      subResource,
      namespace: NS,
      name,
      operation: "CONNECT",
      userInfo: alice,
    },
  });
/** The ten reviews of --review mix (see the top of this file); MIX_OBJECTS are what they name. */
const mixReview = (i: number) => {
  switch (i % 10) {
    case 1:
      return createReview(i, "autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", {
        ...meta(i),
        spec: {
          scaleTargetRef: { apiVersion: "apps/v1", kind: "Deployment", name: "bench-web" },
          maxReplicas: 2,
        },
      });
    case 2:
      return createReview(i, "networking.k8s.io", "v1", "ingresses", "Ingress", {
        ...meta(i),
        spec: { defaultBackend: { service: { name: "bench-web", port: { number: 80 } } } },
      });
    case 3:
      return createReview(i, "", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", {
        ...meta(i),
        spec: {
          volumeName: "bench-pv-alpha",
          accessModes: ["ReadWriteOnce"],
          resources: { requests: { storage: "1Mi" } },
        },
      });
    case 4:
      return createReview(i, "", "v1", "configmaps", "ConfigMap", {
        ...meta(i, {
          ownerReferences: [{ apiVersion: "apps/v1", kind: "Deployment", name: "bench-web", uid: webUid }],
        }),
      });
    case 5:
      return createReview(i, "", "v1", "pods", "Pod", {
        ...meta(i),
        spec: { priorityClassName: "bench-high-alpha", containers: [{ name: "main", image: "busybox" }] },
      });
    case 7:
      return connect(i, "services", "proxy", "bench-web:80");
    case 8:
      return createReview(i, "", "v1", "events", "Event", {
        ...meta(i),
        involvedObject: { apiVersion: "v1", kind: "Pod", name: "pod-0", namespace: NS },
        reason: "Bench",
      });
    default:
      return connect(i, "pods", "exec", `pod-${target(i)}`);
  }
};
let webUid = "";
/** What the mix names, made before the load (ALPHA's). */
const MIX_OBJECTS = [
  {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: { name: "bench-web", namespace: NS, labels: ALPHA_LABEL },
    spec: {
      replicas: 0,
      selector: { matchLabels: ALPHA_LABEL },
      template: {
        metadata: { labels: ALPHA_LABEL },
        spec: { containers: [{ name: "main", image: "busybox" }] },
      },
    },
  },
  {
    apiVersion: "v1",
    kind: "Service",
    metadata: { name: "bench-web", namespace: NS, labels: ALPHA_LABEL },
    spec: { selector: ALPHA_LABEL, ports: [{ port: 80 }] },
  },
  {
    apiVersion: "v1",
    kind: "PersistentVolume",
    metadata: { name: "bench-pv-alpha", labels: ALPHA_LABEL },
    spec: {
      capacity: { storage: "1Mi" },
      accessModes: ["ReadWriteOnce"],
      hostPath: { path: "/tmp/bench-pv" },
    },
  },
  {
    apiVersion: "scheduling.k8s.io/v1",
    kind: "PriorityClass",
    metadata: { name: "bench-high-alpha", labels: ALPHA_LABEL },
    value: 1000,
  },
];
const review = (i: number) =>
  access ? accessReview(i) : mix ? mixReview(i) : connect(i, "pods", "exec", `pod-${target(i)}`);

const VEGETA = join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "svc-tools", "bin", "vegeta");
if (!existsSync(VEGETA))
  throw new Error(
    `vegeta not found at ${VEGETA}: GOBIN=${dirname(VEGETA)} go install github.com/tsenart/vegeta/v12@v12.13.0`,
  );

/** One round: vegeta sends `rate` reviews a second for `seconds` over keep-alive HTTPS; the server's CPU from /proc. */
function load(url: string, pid: number) {
  const targets = join(bench.dir, "targets.jsonl");
  writeFileSync(
    targets,
    Array.from({ length: 10 }, (_, i) =>
      JSON.stringify({
        method: "POST",
        url,
        body: Buffer.from(review(i)).toString("base64"),
        header: { "Content-Type": ["application/json"] },
      }),
    ).join("\n"),
  );
  const cpu0 = cpuUs(pid);
  const attack = Bun.spawnSync(
    [
      VEGETA,
      "attack",
      "-format=json",
      `-targets=${targets}`,
      `-rate=${rate}/s`,
      `-duration=${seconds}s`,
      `-root-certs=${caFile}`,
      "-keepalive=true",
    ],
    { stdout: "pipe", stderr: "pipe" },
  );
  const cpu = cpuUs(pid) - cpu0;
  if (attack.exitCode !== 0) throw new Error(`vegeta attack: ${attack.stderr}`);
  const report = Bun.spawnSync([VEGETA, "report", "-type=json"], { stdin: attack.stdout, stdout: "pipe" });
  const r = JSON.parse(report.stdout.toString()) as {
    requests: number;
    throughput: number;
    success: number;
    status_codes: Record<string, number>;
    latencies: { "50th": number; "99th": number; max: number };
  };
  const answered = r.status_codes["200"] ?? 0;
  return {
    sent: r.requests,
    answered,
    rate: r.throughput,
    p50: r.latencies["50th"] / 1e6,
    p99: r.latencies["99th"] / 1e6,
    max: r.latencies.max / 1e6,
    cpuUsPerReview: cpu / Math.max(1, answered),
  };
}

/** Before the load: the webhook answers the mix as it should (9 allowed, 1 refused in 10). */
async function checkAnswers(url: string) {
  const allowed = await Promise.all(
    Array.from({ length: 10 }, async (_, i) => {
      const r = await fetch(url, { method: "POST", body: review(i), tls: { ca } });
      const answer = (await r.json()) as { response?: { allowed: boolean }; status?: { denied?: boolean } };
      return access ? answer.status?.denied !== true : answer.response?.allowed === true;
    }),
  );
  if (allowed.filter((a) => !a).length !== 1 || allowed[9] !== false)
    throw new Error(`unexpected answers from ${url}: ${allowed.join(", ")}`);
}

try {
  process.stderr.write(`creating ${podCount} ${access ? "secrets" : "pods"} in ${NS}\n`);
  admin(["apply", "-f", "-"], stringify({ apiVersion: "v1", kind: "Namespace", metadata: { name: NS } }));
  const objects = Array.from({ length: podCount }, (_, i) =>
    stringify({
      apiVersion: "v1",
      kind: access ? "Secret" : "Pod",
      metadata: {
        name: `${access ? "secret" : "pod"}-${i}`,
        namespace: NS,
        labels: { "svc.io/compartment": i % 2 ? "UK-S-BRAVO" : "US-TS-ALPHA" },
      },
      ...(access
        ? { stringData: { k: "v" } }
        : { spec: { containers: [{ name: "main", image: "busybox" }] } }),
    }),
  );
  admin(["apply", "-f", "-"], objects.join("---\n"));
  if (mix) {
    admin(["apply", "-f", "-"], MIX_OBJECTS.map((o) => stringify(o)).join("---\n"));
    webUid = admin(["get", "deployment", "bench-web", "-n", NS, "-o", "jsonpath={.metadata.uid}"]);
  }

  const [webhookPort, floorPort] = [await freePort(), await freePort()];
  const config = join(bench.dir, "admission.yaml");
  const admissionConfig = (port: number) =>
    stringify({
      metricsAddr: "0",
      admission: {
        address: `127.0.0.1:${port}`,
        cert_file: join(home, "tls.crt"),
        key_file: join(home, "tls.key"),
        kubeconfig: join(home, "kubeconfig"),
      },
    });
  writeFileSync(config, admissionConfig(webhookPort));
  const log = join(bench.dir, "webhook.log");
  const webhook = bench.start([join(ROOT, "dist/svc-proxy"), "-config", config], {}, log);
  const baselinePort = values.baseline ? await freePort() : 0;
  const baselineConfig = join(bench.dir, "admission-baseline.yaml");
  if (values.baseline) writeFileSync(baselineConfig, admissionConfig(baselinePort));
  const baseline = values.baseline
    ? bench.start([values.baseline, "-config", baselineConfig], {}, join(bench.dir, "baseline.log"))
    : undefined;
  const floor = bench.start([
    process.execPath,
    "-e",
    `Bun.serve({ hostname: "127.0.0.1", port: ${floorPort}, tls: ${JSON.stringify(tls)}, fetch: async (r) => { if (r.method === "GET") return new Response("ok"); const b = await r.json(); return Response.json(b.kind === "SubjectAccessReview" ? { apiVersion: "authorization.k8s.io/v1", kind: "SubjectAccessReview", status: { allowed: false } } : { apiVersion: "admission.k8s.io/v1", kind: "AdmissionReview", response: { uid: b.request.uid, allowed: true } }); } });`,
  ]);
  const ready = (url: string) =>
    waitUntil(
      url,
      () =>
        fetch(url, { tls: { ca } }).then(
          (r) => r.ok,
          () => false,
        ),
      30_000,
    );
  await ready(`https://127.0.0.1:${webhookPort}/readyz`);
  if (baseline) await ready(`https://127.0.0.1:${baselinePort}/readyz`);
  await ready(`https://127.0.0.1:${floorPort}/`);
  const path = access ? "/authorize" : "/validate";
  const setups: [string, string, number][] = [
    ["svc-proxy webhook", `https://127.0.0.1:${webhookPort}${path}`, webhook.pid],
    ["floor (answers without deciding)", `https://127.0.0.1:${floorPort}${path}`, floor.pid],
  ];
  if (baseline) setups.push(["baseline build", `https://127.0.0.1:${baselinePort}${path}`, baseline.pid]);
  await checkAnswers(setups[0]?.[1] as string);
  for (const [, url, pid] of setups) load(url, pid); // warm-up round, discarded
  const results: Record<string, ReturnType<typeof load>[]> = Object.fromEntries(setups.map(([n]) => [n, []]));
  for (let r = 0; r < rounds; r++)
    for (const [name, url, pid] of setups) {
      const x = load(url, pid);
      results[name]?.push(x);
      process.stderr.write(
        `round ${r + 1} ${name}: ${x.answered}/${x.sent} answered, ${x.rate.toFixed(0)}/s, p50 ${x.p50.toFixed(2)} ms, p99 ${x.p99.toFixed(2)} ms, max ${x.max.toFixed(1)} ms, CPU ${x.cpuUsPerReview.toFixed(0)} µs/review\n`,
      );
    }
  const lines = [
    "| setup | answered / sent | rate /s | p50 ms | p99 ms (range over rounds) | server CPU µs / review | CPU vs floor |",
    "|---|---:|---:|---:|---:|---:|---:|",
    ...Object.entries(results).map(([name, xs], _, all) => {
      const floorCpu = median((all[1]?.[1] ?? xs).map((x) => x.cpuUsPerReview));
      const answered = xs.reduce((s, x) => s + x.answered, 0);
      const sent = xs.reduce((s, x) => s + x.sent, 0);
      return `| ${name} | ${answered} / ${sent} | ${median(xs.map((x) => x.rate)).toFixed(0)} | ${median(xs.map((x) => x.p50)).toFixed(2)} | **${median(xs.map((x) => x.p99)).toFixed(2)}** (${range(
        xs.map((x) => x.p99),
        2,
      )}) | ${median(xs.map((x) => x.cpuUsPerReview)).toFixed(0)} | ${(median(xs.map((x) => x.cpuUsPerReview)) / floorCpu).toFixed(2)} |`;
    }),
  ];
  const table = `${lines.join("\n")}\n`;
  process.stdout.write(table);
  if (values.out)
    writeFileSync(
      values.out,
      `# ${access ? "Authorization" : "Admission"} webhook under load (bun bench/admission.ts --review ${values.review} --rate ${rate} --seconds ${seconds} --rounds ${rounds} --pods ${podCount}${values.baseline ? ` --baseline ${values.baseline}` : ""})\n\n${access ? "SubjectAccessReviews of get on Secrets" : mix ? "The reviews the webhook decides by default (exec twice and the service proxy; dry-run creates of an autoscaler, an Ingress, a claim bound by name, a ConfigMap owned by a Deployment, a pod asking for a priority class, an Event; exec into another compartment's pod)" : "CONNECT pods/exec reviews"} from vegeta at ${rate}/s for ${seconds} s per round, ${rounds} rounds alternating with the floor${values.baseline ? " and the baseline build" : ""} after a warm-up round; medians over rounds. 9 in 10 reviews are ${access ? "given no opinion" : "allowed"}, 1 in 10 ${access ? "denied" : "refused"}.\n\n${table}`,
    );
} finally {
  await bench.stop();
  admin(["delete", access ? "secrets" : "pods", "--all", "-n", NS, "--wait=false"]);
  if (mix) {
    admin(["delete", "deployment,service", "bench-web", "-n", NS, "--ignore-not-found"]);
    admin(["delete", "pv/bench-pv-alpha", "priorityclass/bench-high-alpha", "--ignore-not-found"]);
  }
}
