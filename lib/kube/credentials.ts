import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, isAbsolute, join } from "node:path";
import { parse } from "yaml";
import { SvcError } from "../errors.ts";

/**
 * Where and how to reach the cluster API: in-cluster service-account credentials when running in a pod,
 * otherwise the current context of a kubeconfig ($KUBECONFIG, first file, or ~/.kube/config). Bearer
 * tokens, token files and client certificates are supported; exec and auth-provider plugins are not.
 */
export interface KubeCredentials {
  server: string;
  token?: string;
  ca?: string;
  cert?: string;
  key?: string;
  insecure: boolean;
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
  const file = (env.KUBECONFIG?.split(":").find((f) => f) ?? join(homedir(), ".kube", "config")) as string;
  if (!existsSync(file))
    throw new SvcError(
      "kube_api",
      `no cluster credentials: not running in a pod, and no kubeconfig at ${file} (set KUBECONFIG)`,
    );
  return fromKubeconfig(file);
}

/** An entry of a kubeconfig list (clusters, users, contexts): a name and its body under one key. */
type Named = { name?: string } & Record<string, unknown>;

function fromKubeconfig(file: string): KubeCredentials {
  let doc: Record<string, unknown>;
  try {
    doc = parse(readFileSync(file, "utf8")) ?? {};
  } catch (e) {
    const why = (e as NodeJS.ErrnoException).code ?? (e as Error).message;
    throw new SvcError("kube_api", `cannot read kubeconfig ${file}: ${why}`);
  }
  const pick = <T>(list: unknown, name: string, key: string): T | undefined =>
    (Array.isArray(list) ? (list as Named[]) : []).find((e) => e?.name === name)?.[key] as T | undefined;
  const contextName = doc["current-context"] as string | undefined;
  if (!contextName) throw new SvcError("kube_api", `kubeconfig ${file} has no current-context`);
  const context = pick<{ cluster: string; user: string }>(doc.contexts, contextName, "context");
  if (!context) throw new SvcError("kube_api", `kubeconfig ${file}: context ${contextName} not found`);
  const cluster = pick<Record<string, string | boolean>>(doc.clusters, context.cluster, "cluster");
  if (!cluster?.server)
    throw new SvcError("kube_api", `kubeconfig ${file}: cluster ${context.cluster} has no server`);
  const user = pick<Record<string, string>>(doc.users, context.user, "user") ?? {};
  if (user.exec || user["auth-provider"])
    throw new SvcError(
      "kube_api",
      `kubeconfig ${file}: user ${context.user} uses an exec or auth-provider plugin, which svc-proxy does not run; use a token or client certificate`,
    );
  const base = dirname(file);
  const read = (data: string | undefined, path: string | undefined): string | undefined => {
    if (data) return Buffer.from(data, "base64").toString("utf8");
    if (path) return readFileSync(isAbsolute(path) ? path : join(base, path), "utf8");
    return undefined;
  };
  const token = user.token ?? read(undefined, user.tokenFile)?.trim();
  const creds: KubeCredentials = {
    server: String(cluster.server).replace(/\/$/, ""),
    insecure: cluster["insecure-skip-tls-verify"] === true,
    from: `kubeconfig ${file} (context ${contextName})`,
  };
  const ca = read(
    cluster["certificate-authority-data"] as string,
    cluster["certificate-authority"] as string,
  );
  const cert = read(user["client-certificate-data"], user["client-certificate"]);
  const key = read(user["client-key-data"], user["client-key"]);
  return {
    ...creds,
    ...(token ? { token } : {}),
    ...(ca ? { ca } : {}),
    ...(cert ? { cert } : {}),
    ...(key ? { key } : {}),
  };
}
