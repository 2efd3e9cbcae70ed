/**
 * What the admission and authorization webhooks read from the cluster for one decision: marks of the cached
 * kinds from the caches (read once directly when not seen yet), workloads, PersistentVolumes and
 * PriorityClasses read whole, and RoleBindings listed for a service account. Each decision has a budget of
 * direct reads (MAX_DIRECT_READS); past it the decision is refused.
 */
import type { KubeClient } from "../../lib/kube/client.ts";
import {
  CACHED_KINDS,
  type CachedKind,
  entryOf,
  type MarksCache,
  readMeta,
} from "../../lib/kube/marks-cache.ts";
import { type Marks, marksOfMeta } from "../../lib/kube/mls.ts";
import { boundAccounts, priorityClassHarmless } from "../../lib/kube/object-references.ts";
import { podSpecOf } from "../../lib/kube/pod-references.ts";
import type { AdmissionMetrics } from "../metrics.ts";
import type { AccessDeps, TargetKind } from "./access.ts";
import type { ConsistencyDeps, Lookup, ObjectRef } from "./consistency.ts";
import { clip } from "./request.ts";

/** Objects read directly (not in a cache) for one decision, at most: past it the decision is refused. */
const MAX_DIRECT_READS = 16;
/** A lookup gives up before the decision's deadline, so that the refusal says why. */
const LOOKUP_MS = 3_000;
export const CACHED = Object.keys(CACHED_KINDS) as CachedKind[];
/** The cached kinds by "group/Kind" (the core group's: "/Pod"). */
const CACHED_BY_KIND: Record<string, CachedKind> = Object.fromEntries(
  CACHED.map((resource) => [`/${CACHED_KINDS[resource]}`, resource]),
);
/**
 * Cluster-scoped kinds an object may name, read whole when a review needs one, by "group/Kind", with why
 * one of them harms no compartment whatever its marks.
 */
const CLUSTER_PATHS: Record<string, { path: string; harmless?: (o: unknown) => string | undefined }> = {
  "/PersistentVolume": { path: "/api/v1/persistentvolumes/{name}" },
  "scheduling.k8s.io/PriorityClass": {
    path: "/apis/scheduling.k8s.io/v1/priorityclasses/{name}",
    harmless: priorityClassHarmless,
  },
};

/** Workload kinds whose compartment (their pod template's) the webhook can read, by "group/Kind", with their API path. */
const OWNER_PATHS: Record<string, string> = {
  "apps/Deployment": "/apis/apps/v1/namespaces/{ns}/deployments/{name}",
  "apps/ReplicaSet": "/apis/apps/v1/namespaces/{ns}/replicasets/{name}",
  "apps/StatefulSet": "/apis/apps/v1/namespaces/{ns}/statefulsets/{name}",
  "apps/DaemonSet": "/apis/apps/v1/namespaces/{ns}/daemonsets/{name}",
  "batch/Job": "/apis/batch/v1/namespaces/{ns}/jobs/{name}",
  "batch/CronJob": "/apis/batch/v1/namespaces/{ns}/cronjobs/{name}",
  "/ReplicationController": "/api/v1/namespaces/{ns}/replicationcontrollers/{name}",
};
const SCALED: Record<string, string> = {
  deployments: "apps/Deployment",
  replicasets: "apps/ReplicaSet",
  statefulsets: "apps/StatefulSet",
  replicationcontrollers: "/ReplicationController",
};
const RESOURCE_OF: Record<string, string> = {
  Deployment: "deployments",
  ReplicaSet: "replicasets",
  StatefulSet: "statefulsets",
  DaemonSet: "daemonsets",
  Job: "jobs",
  CronJob: "cronjobs",
  ReplicationController: "replicationcontrollers",
};

/** What one decision reads, within its own budget of direct reads. */
export type DecisionReads = Pick<AccessDeps, "targetMarks" | "entry"> &
  Pick<ConsistencyDeps, "lookup" | "bindingsOf">;

export class ClusterReads {
  constructor(
    private readonly client: KubeClient,
    private readonly caches: ReadonlyMap<CachedKind, MarksCache>,
    private readonly metrics: AdmissionMetrics | undefined,
  ) {}

  /** The reads of one decision, sharing one budget of MAX_DIRECT_READS. */
  forDecision(): DecisionReads {
    let left = MAX_DIRECT_READS;
    const spend = () => {
      if (left-- <= 0)
        throw new Error(`more than ${MAX_DIRECT_READS} objects of this review are not in the cache yet`);
    };
    return {
      targetMarks: (kind, namespace, name) => this.targetMarks(spend, kind, namespace, name),
      entry: (kind, namespace, name) => this.cachedMarks(kind, namespace, name, spend),
      lookup: (ref, namespace) => this.lookup(spend, ref, namespace),
      bindingsOf: (namespace, account) => this.bindingsOf(spend, namespace, account),
    };
  }

  private async cachedMarks(kind: CachedKind, namespace: string, name: string, spend: () => void) {
    const cached = this.caches.get(kind)?.get(namespace, name);
    if (cached) return cached;
    spend();
    this.metrics?.cacheMiss(kind);
    // Not seen yet (just created, or the cache is still filling): read it once.
    const meta = await readMeta(this.client, kind, namespace, name, AbortSignal.timeout(LOOKUP_MS));
    return meta === null ? null : entryOf(meta);
  }
  /** An object read whole (a workload's template is not metadata); null when missing or not the expected UID. */
  private async readObject(
    path: string,
    namespace: string,
    name: string,
    spend: () => void,
    uid?: string,
  ): Promise<Record<string, unknown> | null> {
    spend();
    const res = await this.client.fetch(
      path.replace("{ns}", encodeURIComponent(namespace)).replace("{name}", encodeURIComponent(name)),
      { signal: AbortSignal.timeout(LOOKUP_MS) },
    );
    if (res.status === 404) return null;
    if (!res.ok) throw new Error(`read ${clip(name)}: ${res.status} ${(await res.text()).slice(0, 200)}`);
    const o = (await res.json()) as { metadata?: { uid?: string } };
    return uid && o.metadata?.uid !== uid ? null : (o as Record<string, unknown>);
  }
  private async targetMarks(
    spend: () => void,
    kind: TargetKind,
    namespace: string,
    name: string,
  ): Promise<Marks[] | null> {
    if ((CACHED as string[]).includes(kind)) {
      const m = await this.cachedMarks(kind as CachedKind, namespace, name, spend);
      return m === null ? null : [m];
    }
    const o = await this.readObject(OWNER_PATHS[SCALED[kind] as string] as string, namespace, name, spend);
    if (o === null) return null;
    return [marksOfMeta(o.metadata), marksOfMeta(podSpecOf(kind, o)?.meta)];
  }
  /**
   * Any object a review names, by group, kind and name: the cached kinds from their caches, workloads read
   * whole (what their pods will carry), the cluster-scoped kinds objects name read directly; any other kind
   * is unknown. A priority class that never preempts is harmless to every compartment.
   */
  private async lookup(spend: () => void, ref: ObjectRef, reviewed: string): Promise<Lookup> {
    const key = `${ref.group}/${ref.kind}`;
    const namespace = ref.namespace ?? reviewed;
    const what = `${ref.kind} ${clip(namespace)}/${clip(ref.name)}`;
    const cached = Object.hasOwn(CACHED_BY_KIND, key) ? CACHED_BY_KIND[key] : undefined;
    if (cached) {
      const marks = await this.cachedMarks(cached, namespace, ref.name, spend);
      // Cached entries keep their UID: an owner of another UID is not this one.
      if (marks === null || (ref.uid && marks.uid && marks.uid !== ref.uid)) return { found: "no" };
      return { found: "yes", marks, what };
    }
    const cluster = Object.hasOwn(CLUSTER_PATHS, key) ? CLUSTER_PATHS[key] : undefined;
    if (cluster) {
      const o = await this.readObject(cluster.path, "", ref.name, spend, ref.uid);
      if (o === null) return { found: "no" };
      const harmless = cluster.harmless?.(o);
      return {
        found: "yes",
        marks: marksOfMeta(o.metadata),
        what: `${ref.kind} ${clip(ref.name)}`,
        ...(harmless ? { harmless } : {}),
      };
    }
    const path = Object.hasOwn(OWNER_PATHS, key) ? OWNER_PATHS[key] : undefined;
    if (!path) return { found: "unknown-kind" };
    const o = await this.readObject(path, namespace, ref.name, spend, ref.uid);
    if (o === null) return { found: "no" };
    const template = podSpecOf(RESOURCE_OF[ref.kind] as string, o);
    return { found: "yes", marks: marksOfMeta(template?.meta ?? o.metadata), what };
  }

  /** The RoleBindings of every namespace that name `account` of `namespace` (listed a page at a time). */
  private async bindingsOf(
    spend: () => void,
    namespace: string,
    account: string,
  ): Promise<{ marks: Marks; what: string }[]> {
    const found: { marks: Marks; what: string }[] = [];
    let token: string | undefined;
    // One direct read of the budget, however many pages: the review's deadline bounds the listing.
    spend();
    do {
      const query = new URLSearchParams({ limit: "500", ...(token ? { continue: token } : {}) });
      const res = await this.client.fetch(`/apis/rbac.authorization.k8s.io/v1/rolebindings?${query}`, {
        signal: AbortSignal.timeout(LOOKUP_MS),
      });
      if (!res.ok) throw new Error(`list rolebindings: ${res.status} ${(await res.text()).slice(0, 200)}`);
      const page = (await res.json()) as {
        items?: { metadata?: { name?: string; namespace?: string } }[];
        metadata?: { continue?: string };
      };
      for (const b of page.items ?? [])
        if (
          boundAccounts(b, b.metadata?.namespace ?? "").some(
            (s) => s.name === account && s.namespace === namespace,
          )
        )
          found.push({
            marks: marksOfMeta(b.metadata),
            what: `RoleBinding ${clip(b.metadata?.namespace)}/${clip(b.metadata?.name)}`,
          });
      token = page.metadata?.continue || undefined;
    } while (token);
    return found;
  }
}
