import { buildInfo } from "../build-info.ts";
import { SvcError } from "../errors.ts";
import type { KubeCredentials } from "./kubeconfig.ts";

/** The parts of a Pod object the notary states. */
export interface Pod {
  metadata: {
    name: string;
    namespace: string;
    uid: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    resourceVersion?: string;
  };
  spec: {
    serviceAccountName?: string;
    containers: { image: string }[];
    initContainers?: { image: string }[];
  };
}

/**
 * A GET of `path` on the cluster API with the resolved credentials (kubeconfig.ts): token, client
 * certificate, impersonation and CA as kubectl would send them. Unreachable is a kube_api error.
 */
export async function apiGet(
  c: KubeCredentials,
  path: string,
  accept = "application/json",
): Promise<Response> {
  // Named, so that an API server's audit log tells svc's own look-ups from kubectl's.
  const headers = new Headers({ accept, "user-agent": `svc/${buildInfo().version}` });
  if (c.token) headers.set("authorization", `Bearer ${c.token}`);
  if (c.impersonate) {
    headers.set("impersonate-user", c.impersonate.user);
    for (const g of c.impersonate.groups) headers.append("impersonate-group", g);
    if (c.impersonate.uid) headers.set("impersonate-uid", c.impersonate.uid);
  }
  try {
    return await fetch(`${c.server}${path}`, {
      headers,
      tls: {
        ...(c.ca ? { ca: c.ca } : {}),
        ...(c.cert ? { cert: c.cert } : {}),
        ...(c.key ? { key: c.key } : {}),
        rejectUnauthorized: !c.insecure,
      },
      signal: AbortSignal.timeout(10_000),
    });
  } catch (e) {
    throw new SvcError(
      "kube_api",
      `cluster API ${c.server} unreachable (${c.from}): ${(e as Error).message}`,
    );
  }
}

/** GET /api/v1/namespaces/{ns}/pods/{name}; undefined when the pod does not exist. */
export async function getPod(c: KubeCredentials, namespace: string, name: string): Promise<Pod | undefined> {
  const res = await apiGet(
    c,
    `/api/v1/namespaces/${encodeURIComponent(namespace)}/pods/${encodeURIComponent(name)}`,
  );
  if (res.status === 404) return undefined;
  if (!res.ok) {
    const reason = ((await res.json().catch(() => ({}))) as { message?: string }).message ?? res.statusText;
    throw new SvcError(
      "kube_api",
      `cluster API refused to get pod ${namespace}/${name}: ${res.status} ${reason} (${c.from}; "get" on pods is needed)`,
    );
  }
  return (await res.json()) as Pod;
}
