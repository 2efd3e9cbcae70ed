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

/** GET /api/v1/namespaces/{ns}/pods/{name}; undefined when the pod does not exist. */
export async function getPod(c: KubeCredentials, namespace: string, name: string): Promise<Pod | undefined> {
  const headers = new Headers({ accept: "application/json" });
  if (c.token) headers.set("authorization", `Bearer ${c.token}`);
  if (c.impersonate) {
    headers.set("impersonate-user", c.impersonate.user);
    for (const g of c.impersonate.groups) headers.append("impersonate-group", g);
    if (c.impersonate.uid) headers.set("impersonate-uid", c.impersonate.uid);
  }
  const url = `${c.server}/api/v1/namespaces/${encodeURIComponent(namespace)}/pods/${encodeURIComponent(name)}`;
  let res: Response;
  try {
    res = await fetch(url, {
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
