import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { SvcError } from "../errors.ts";
import { kubeconfigFiles, resolveKubeconfig } from "./kubeconfig.ts";

/**
 * Where and how to reach the cluster API: in-cluster service-account credentials when running in a pod,
 * otherwise the current context of the kubeconfig, resolved as kubectl does (lib/kube/kubeconfig.ts).
 * Bearer tokens, token files and client certificates are supported; exec and auth-provider plugins are not.
 */
export interface KubeCredentials {
  server: string;
  token?: string;
  ca?: string;
  cert?: string;
  key?: string;
  insecure: boolean;
  /** Impersonation (`--as`, or `as` in the kubeconfig's user): sent as Impersonate-* headers. */
  impersonate?: { user: string; groups: string[]; uid?: string };
  /** Where the credentials came from, for error messages. */
  from: string;
}

const SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

export function loadKubeCredentials(env = process.env, saDir = SA_DIR): KubeCredentials {
  if (env.KUBERNETES_SERVICE_HOST && existsSync(join(saDir, "token"))) {
    const host = env.KUBERNETES_SERVICE_HOST.includes(":")
      ? `[${env.KUBERNETES_SERVICE_HOST}]`
      : env.KUBERNETES_SERVICE_HOST;
    return {
      server: `https://${host}:${env.KUBERNETES_SERVICE_PORT ?? "443"}`,
      token: readFileSync(join(saDir, "token"), "utf8").trim(),
      ca: readFileSync(join(saDir, "ca.crt"), "utf8"),
      insecure: false,
      from: "in-cluster service account",
    };
  }
  const r = resolveKubeconfig(new Map(), env);
  if ("ok" in r) {
    const { namespace: _, ...creds } = r.ok;
    return creds;
  }
  const { files } = kubeconfigFiles(undefined, env);
  throw new SvcError(
    "kube_api",
    `no usable cluster credentials: not running in a pod, and the kubeconfig (${files.join(", ")}; set KUBECONFIG) gives ${r.unsupported}; svc-proxy supports tokens, token files and client certificates`,
  );
}
