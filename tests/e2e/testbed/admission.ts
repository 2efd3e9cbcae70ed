import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { parse, stringify } from "yaml";
import { waitUntil } from "../../support/wait.ts";
import { clientKubeconfig } from "./kube.ts";
import type { ClusterPki } from "./pki.ts";
import { freePort, startDaemon } from "./process.ts";

/**
 * The cluster side of svc's compartments on the test bed: deploy/admission/base applied with kustomize (the
 * policy, its binding, RBAC, the override ClusterRole and the webhook configuration), with the webhook
 * pointed at a loopback URL instead of the in-cluster Service, and svc-proxy from source serving it with
 * the service account token of deploy/admission's svc-admission account.
 */
export interface AdmissionState {
  pid: number;
  /** The webhook's https://127.0.0.1:<port>. */
  url: string;
  /** svc-proxy's log (JSON lines). */
  log: string;
}

const REPO = new URL("../../..", import.meta.url).pathname.replace(/\/$/, "");

export async function startAdmission(
  server: string,
  pki: ClusterPki,
  dir: string,
  logs: string,
  kubectl: (args: string[], input?: string) => string,
  port: number,
): Promise<AdmissionState> {
  const home = join(dir, "admission");
  mkdirSync(home, { recursive: true });
  const metricsPort = await freePort();
  const url = `https://127.0.0.1:${port}`;
  writeFileSync(
    join(home, "kustomization.yaml"),
    stringify({
      apiVersion: "kustomize.config.k8s.io/v1beta1",
      kind: "Kustomization",
      resources: [relative(home, join(REPO, "deploy", "admission", "base"))],
      patches: [
        {
          target: { kind: "ValidatingWebhookConfiguration", name: "svc-pod-access" },
          // Every entry of the configuration to the one server.
          patch: stringify(
            webhookEntries().map((i) => ({
              op: "replace",
              path: `/webhooks/${i}/clientConfig`,
              value: { url: `${url}/validate`, caBundle: Buffer.from(pki.caPem).toString("base64") },
            })),
          ),
        },
        {
          patch: stringify({
            $patch: "delete",
            apiVersion: "apps/v1",
            kind: "Deployment",
            metadata: { name: "svc-admission", namespace: "svc-system" },
          }),
        },
      ],
    }),
  );
  kubectl(["apply", "-k", home]);
  const token = kubectl(["create", "token", "svc-admission", "-n", "svc-system", "--duration=48h"]).trim();
  const serving = await pki.servingCert("svc-admission");
  const certFile = join(home, "tls.crt");
  const keyFile = join(home, "tls.key");
  writeFileSync(certFile, serving.cert);
  writeFileSync(keyFile, serving.key, { mode: 0o600 });
  const kubeconfig = join(home, "kubeconfig");
  writeFileSync(kubeconfig, clientKubeconfig(server, pki.caPem, token), { mode: 0o600 });
  const config = join(home, "svc-proxy.yaml");
  writeFileSync(
    config,
    stringify({
      metricsAddr: `127.0.0.1:${metricsPort}`,
      admission: { address: `127.0.0.1:${port}`, cert_file: certFile, key_file: keyFile, kubeconfig },
    }),
  );
  const log = join(logs, "svc-admission.log");
  const pid = startDaemon(process.execPath, [join(REPO, "cmd", "svc-proxy.ts"), "-config", config], log);
  await waitUntil(
    "svc-proxy admission webhook",
    async () => (await fetch(`${url}/readyz`, { tls: { ca: pki.caPem } })).ok,
    30_000,
  );
  return { pid, url, log };
}

/** The indexes of the shipped webhook configuration's entries. */
function webhookEntries(): number[] {
  const file = join(REPO, "deploy", "admission", "base", "webhook.yaml");
  const config = parse(readFileSync(file, "utf8")) as { webhooks: unknown[] };
  return config.webhooks.map((_, i) => i);
}
