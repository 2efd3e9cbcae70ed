import { afterAll, beforeAll } from "bun:test";
import { chownSync, copyFileSync, mkdirSync, readFileSync, statSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { COMPARTMENT_LABEL } from "../../lib/kube/mls.ts";
import { BUN, type Proc, spawnProc } from "../support/proc.ts";
import { down, readTestbed, TESTBED_DIR, type Testbed, up } from "./testbed/index.ts";
import { asWorkload, type Workload } from "./testbed/spire.ts";

/**
 * kubectl exec and attach run over SPDY in every e2e test, not over WebSocket (kubectl's default since
 * 1.31): client-go's WebSocket client now and then gets the first frame of standard output before it has
 * set up that stream, logs "Unknown stream id 1, discarding message" on standard error and drops the
 * frame, with exit status 0 (4 of 300 `kubectl exec` runs against kwok with both cores busy; kubectl 1.33
 * too; none over SPDY). The webhook decides both alike (admission.e2e.test.ts runs both); kubectl's own
 * race would fail tests that read a command's output. `make e2e` starts bun with the variable set: a
 * Bun.spawn without `env` passes the environment the process started with, not process.env. Set here
 * as well for a file run on its own, for the spawns that pass process.env.
 */
process.env.KUBECTL_REMOTE_COMMAND_WEBSOCKETS = "false";

/**
 * The test bed for one e2e test file: the one `make testbed-up` started, or a new one that is stopped
 * after the file (its logs stay in .testbed/logs for a look after a failure).
 */
export function useTestbed(): () => Testbed {
  let tb: Testbed | undefined;
  let owned = false;
  beforeAll(async () => {
    tb = readTestbed();
    if (!tb) {
      tb = await up(TESTBED_DIR, (m) => process.stderr.write(`testbed: ${m}\n`));
      owned = true;
    }
  }, 300_000);
  afterAll(async () => {
    if (owned) await down(tb, true);
  });
  return () => {
    if (!tb) throw new Error("test bed not started");
    return tb;
  };
}

/** Runs `cmd` as the workload's unix uid, so the SPIRE agent attests it as that pod. */
export function spawnAsWorkload(
  tb: Testbed,
  w: Workload,
  cmd: string[],
  env: Record<string, string> = {},
): Proc {
  const home = join(tb.dir, "home", w.name);
  mkdirSync(home, { recursive: true });
  chownSync(home, w.uid, w.uid);
  return spawnProc(asWorkload(w, cmd), {
    HOME: home,
    TMPDIR: home,
    SPIFFE_ENDPOINT_SOCKET: `unix://${tb.spire.agentSocket}`,
    ...env,
  });
}

export function workload(tb: Testbed, name: string): Workload {
  const w = tb.spire.workloads[name];
  if (!w)
    throw new Error(`no test bed workload ${name} (have: ${Object.keys(tb.spire.workloads).join(", ")})`);
  return w;
}

/** An RE2 pattern that matches exactly `id`. */
export const exactId = (id: string) => `^${id.replace(/[.]/g, "\\.")}$`;

/** svc-proxy from source as workload `as`, on the test bed's SPIRE agent; `config` adds to or overrides. */
export function svcProxyAs(tb: Testbed, as: string, config: object, env: Record<string, string> = {}): Proc {
  return spawnAsWorkload(tb, workload(tb, as), [BUN, "cmd/svc-proxy.ts"], {
    SVC_PROXY_CONFIG: JSON.stringify({
      spiffe: { workload_socket_path: `unix://${tb.spire.agentSocket}` },
      metricsAddr: "0",
      ...config,
    }),
    ...env,
  });
}

/** A directory of the test bed owned by workload `as`, with its own copy of the (root-only) kubeconfig. */
export function workloadHome(tb: Testbed, as: string, name: string): { dir: string; kubeconfig: string } {
  const w = workload(tb, as);
  const dir = join(tb.dir, "home", name);
  mkdirSync(dir, { recursive: true });
  chownSync(dir, w.uid, w.uid);
  const kubeconfig = join(dir, "kubeconfig");
  copyFileSync(tb.kube.kubeconfig, kubeconfig);
  chownSync(kubeconfig, w.uid, w.uid);
  return { dir, kubeconfig };
}

/** `svc context create` for each [name, compartment, kube context, namespace] (country US, sensitivity TS). */
export function createContexts(
  svc: (args: string[]) => { code: number | null },
  contexts: (readonly [string, string, string, string])[],
): (number | null)[] {
  return contexts.map(
    ([name, compartment, kube, namespace]) =>
      svc([
        "context",
        "create",
        name,
        "--country=US",
        "--sensitivity=TS",
        `--compartment=${compartment}`,
        `--kube-context=${kube}`,
        `--namespace=${namespace}`,
      ]).code,
  );
}

/** An event of kube-apiserver's audit log (the fields the tests read). */
export interface AuditEvent {
  verb: string;
  requestURI: string;
  user: { username: string };
  impersonatedUser?: { username: string };
  userAgent?: string;
  objectRef?: { resource?: string; subresource?: string; name?: string; namespace?: string };
  responseStatus?: { code?: number };
  annotations?: Record<string, string>;
}

/** The audit log's size now: pass it to auditSince for the events a step causes. */
export const auditSize = (tb: Testbed) => statSync(tb.kube.auditLog).size;

/** The API server's audit events written since `from` (a byte offset of its log). */
export function auditSince(tb: Testbed, from: number): AuditEvent[] {
  return readFileSync(tb.kube.auditLog)
    .subarray(from)
    .toString()
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as AuditEvent);
}

/** The kubectl command line of a test bed user in a namespace. */
export function kubectlArgv(
  tb: Testbed,
  user: keyof Testbed["kube"]["users"],
  namespace: string,
  args: string[],
): string[] {
  return [
    "kubectl",
    `--kubeconfig=${tb.kube.kubeconfig}`,
    `--context=${tb.kube.users[user].context}`,
    "-n",
    namespace,
    ...args,
  ];
}

/** Plain kubectl as one of the test bed's users in a namespace; never throws, returns what it printed. */
export function kubectlUser(
  tb: Testbed,
  user: keyof Testbed["kube"]["users"],
  namespace: string,
  args: string[],
  input?: string,
): { code: number | null; out: string; err: string } {
  const r = Bun.spawnSync(kubectlArgv(tb, user, namespace, args), {
    stdin: input ? Buffer.from(input) : "ignore",
    timeout: 30_000,
  });
  return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
}

/** The test bed's two compartments: alice's and olivia's, and bob's (testbed/kube.ts). */
export const ALPHA = "US-TS-ALPHA";
export const BRAVO = "UK-S-BRAVO";

/** An object of `kind` marked for `compartment` (its label), with the rest of its fields. */
export const marked = (
  kind: string,
  name: string,
  compartment: string,
  rest: object = {},
  apiVersion = "v1",
) => ({
  apiVersion,
  kind,
  metadata: { name, labels: { [COMPARTMENT_LABEL]: compartment } },
  ...rest,
});

/** The one answer of modelBehindApi's model: a chat completion as an OpenAI-compatible server writes it. */
export const COMPLETION = JSON.stringify({
  id: "chatcmpl-1",
  object: "chat.completion",
  created: 1_700_000_000,
  model: "test-model",
  choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content: "ok" } }],
});

/**
 * A model (COMPLETION to every /v1/ request, "plain" to others) behind pod api-0's server proxy on
 * `apiPort`, which admits only pod web-0: what a notarizing client proxy as web-0 calls. Returns the model.
 */
export async function modelBehindApi(tb: Testbed, apiPort: number): Promise<Server> {
  const model = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      res.writeHead(200, { "content-type": req.url?.startsWith("/v1/") ? "application/json" : "text/plain" });
      res.end(req.url?.startsWith("/v1/") ? COMPLETION : "plain\n");
    });
  });
  await new Promise<void>((r) => model.listen(0, "127.0.0.1", () => r()));
  svcProxyAs(tb, "api", {
    listeners: [
      {
        name: "in",
        address: `127.0.0.1:${apiPort}`,
        mode: "server",
        target: { url: `http://127.0.0.1:${(model.address() as AddressInfo).port}` },
        source: { spiffe_ids: [exactId(workload(tb, "web").spiffeId)] },
      },
    ],
  });
  return model;
}
