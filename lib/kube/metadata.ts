/**
 * Metadata-only look-ups of the objects that hold data (Secrets, ConfigMaps): svc asks the API server for
 * a PartialObjectMetadataList and never holds their data.
 */
import { SvcError } from "../errors.ts";
import type { KubeCredentials } from "./kubeconfig.ts";
import type { KubeObject } from "./lookup.ts";
import { apiGet } from "./pods.ts";

/**
 * The core resources whose objects hold data (docs/svc-guard.md, "Reads of Secrets, ConfigMaps and
 * logs"), by the word kubectl reads for them: svc lists their metadata only, never their data.
 */
export const DATA_RESOURCES: Record<string, { resource: string; kind: string }> = {
  secret: { resource: "secrets", kind: "Secret" },
  secrets: { resource: "secrets", kind: "Secret" },
  configmap: { resource: "configmaps", kind: "ConfigMap" },
  configmaps: { resource: "configmaps", kind: "ConfigMap" },
  cm: { resource: "configmaps", kind: "ConfigMap" },
};

const PAGE = 500;

/**
 * The objects of a core resource as metadata only (a PartialObjectMetadataList: names, labels,
 * annotations; no data), in one namespace or in all (`namespace` undefined), with the label and field
 * selectors kubectl would send; page by page. Each item gets the resource's kind, as kubectl's would have.
 */
export async function listMetadata(
  c: KubeCredentials,
  r: { resource: string; kind: string },
  o: { namespace?: string; labelSelector?: string; fieldSelector?: string },
): Promise<KubeObject[]> {
  const base =
    o.namespace === undefined ? "/api/v1" : `/api/v1/namespaces/${encodeURIComponent(o.namespace)}`;
  const out: KubeObject[] = [];
  let next: string | undefined;
  do {
    const query = new URLSearchParams({ limit: String(PAGE) });
    if (o.labelSelector) query.set("labelSelector", o.labelSelector);
    if (o.fieldSelector) query.set("fieldSelector", o.fieldSelector);
    if (next) query.set("continue", next);
    const res = await apiGet(
      c,
      `${base}/${r.resource}?${query}`,
      "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    );
    if (!res.ok) {
      const reason = ((await res.json().catch(() => ({}))) as { message?: string }).message ?? res.statusText;
      throw new SvcError(
        "kube_api",
        `cannot check the compartment: the cluster API refused to list ${r.resource}: ${res.status} ${reason} (${c.from})`,
      );
    }
    const page = (await res.json()) as {
      kind?: string;
      items?: KubeObject[];
      metadata?: { continue?: string };
    };
    if (page.kind !== "PartialObjectMetadataList")
      throw new SvcError(
        "kube_api",
        `cannot check the compartment: ${c.server} answered no metadata list of ${r.resource}`,
      );
    for (const item of page.items ?? []) out.push({ ...item, kind: r.kind });
    next = page.metadata?.continue || undefined;
  } while (next);
  return out;
}
