import { CACHED_KINDS, type CachedKind, entryOf, MarksCache, readMeta } from "../../lib/kube/marks-cache.ts";
import { type Marks, marksOfMeta } from "../../lib/kube/mls.ts";
import { boundAccounts, priorityClassHarmless } from "../../lib/kube/object-references.ts";
import { podSpecOf } from "../../lib/kube/pod-references.ts";
import type { AdmissionConfig } from "../config/types.ts";
import type { Logger } from "../log.ts";
import type { AdmissionMetrics } from "../metrics.ts";
import type { TargetKind } from "./access.ts";
import {
  type AccessAnswer,
  type AccessReviewSpec,
  CLEARANCE,
  decideRead,
  guardedRead,
  IMPERSONATE,
  type ReadVerdict,
} from "./authorize.ts";
import type { Lookup, ObjectRef } from "./consistency.ts";
import { type AdmissionRequest, clip, type UserInfo, type Verdict } from "./request.ts";
import { review, reviewLabel } from "./review.ts";
import { startAdmissionServer } from "./server.ts";
import { readTlsPair, watchTlsPair } from "./tls-files.ts";

/**
 * The admission webhook of svc-proxy (the `admission:` block, docs/admission.md): metadata caches of the
 * kinds in CACHED_KINDS (pods, what pods refer to, Services), fed by watches; workloads, PersistentVolumes
 * and PriorityClasses read directly when a review needs one (scale, an owner, what an object names), and
 * RoleBindings listed for a new service account; the override permission asked with a SubjectAccessReview
 * (answers kept for OVERRIDE_TTL_MS); one log line per refusal and per override, and metrics.
 */
const OVERRIDE_TTL_MS = 10_000;
/** One deadline for a review's lookups, under the API server's 5 s. */
const DECIDE_MS = 4_000;
/** The same for an access review, under deploy/admission/authorization's 3 s: the denial says why. */
const AUTHORIZE_MS = 2_500;
const OVERRIDE_CACHE_MAX = 10_000;
/** Objects read directly (not in a cache) for one review, at most: past it the review is refused. */
const MAX_DIRECT_READS = 16;
/** A lookup gives up before the review's deadline, so that the refusal says why. */
const LOOKUP_MS = 3_000;
const CACHED = Object.keys(CACHED_KINDS) as CachedKind[];
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

export interface RunningAdmission {
  port: number;
  close(): Promise<void>;
}

export async function startAdmission(
  config: AdmissionConfig,
  log: Logger,
  metrics: AdmissionMetrics | undefined,
): Promise<RunningAdmission> {
  const tls = readTlsPair(config.certFile, config.keyFile);
  const { openKubeClient } = await import("../../lib/kube/client.ts");
  // A review's lookups give up before the API server's webhook timeout (5 s), so that the refusal says
  // why; the cache's list pages may take longer.
  const client = openKubeClient(config.kubeconfig, 3_000);
  const cacheClient = client.withTimeout(30_000);
  const alog = log.with({ component: "admission" });
  const caches = new Map(
    CACHED.map((kind) => [
      kind,
      new MarksCache(cacheClient, kind, {
        synced: (k, objects, ms) => alog.info("cache filled", { kind: k, objects, list_ms: ms }),
        error: (k, message, retryMs) => alog.warn("cache", { kind: k, error: message, retry_ms: retryMs }),
      }),
    ]),
  );
  for (const cache of caches.values()) cache.start();
  const ready = () => [...caches.values()].every((c) => c.ready);

  /** A review's budget of direct reads (see MAX_DIRECT_READS). */
  const budget = () => {
    let left = MAX_DIRECT_READS;
    return () => {
      if (left-- <= 0)
        throw new Error(`more than ${MAX_DIRECT_READS} objects of this review are not in the cache yet`);
    };
  };
  const cachedMarks = async (kind: CachedKind, namespace: string, name: string, spend: () => void) => {
    const cached = caches.get(kind)?.get(namespace, name);
    if (cached) return cached;
    spend();
    metrics?.cacheMiss(kind);
    // Not seen yet (just created, or the cache is still filling): read it once.
    const meta = await readMeta(client, kind, namespace, name, AbortSignal.timeout(LOOKUP_MS));
    return meta === null ? null : entryOf(meta);
  };
  /** An object read whole (a workload's template is not metadata); null when missing or not the expected UID. */
  const readObject = async (
    path: string,
    namespace: string,
    name: string,
    spend: () => void,
    uid?: string,
  ): Promise<Record<string, unknown> | null> => {
    spend();
    const res = await client.fetch(
      path.replace("{ns}", encodeURIComponent(namespace)).replace("{name}", encodeURIComponent(name)),
      { signal: AbortSignal.timeout(LOOKUP_MS) },
    );
    if (res.status === 404) return null;
    if (!res.ok) throw new Error(`read ${clip(name)}: ${res.status} ${(await res.text()).slice(0, 200)}`);
    const o = (await res.json()) as { metadata?: { uid?: string } };
    return uid && o.metadata?.uid !== uid ? null : (o as Record<string, unknown>);
  };
  const targetMarks =
    (spend: () => void) =>
    async (kind: TargetKind, namespace: string, name: string): Promise<Marks[] | null> => {
      if ((CACHED as string[]).includes(kind)) {
        const m = await cachedMarks(kind as CachedKind, namespace, name, spend);
        return m === null ? null : [m];
      }
      const o = await readObject(OWNER_PATHS[SCALED[kind] as string] as string, namespace, name, spend);
      if (o === null) return null;
      return [marksOfMeta(o.metadata), marksOfMeta(podSpecOf(kind, o)?.meta)];
    };
  /**
   * Any object a review names, by group, kind and name: the cached kinds from their caches, workloads read
   * whole (what their pods will carry), the cluster-scoped kinds objects name read directly; any other kind
   * is unknown. A priority class that never preempts is harmless to every compartment.
   */
  const lookup =
    (spend: () => void) =>
    async (ref: ObjectRef, reviewed: string): Promise<Lookup> => {
      const key = `${ref.group}/${ref.kind}`;
      const namespace = ref.namespace ?? reviewed;
      const what = `${ref.kind} ${clip(namespace)}/${clip(ref.name)}`;
      const cached = Object.hasOwn(CACHED_BY_KIND, key) ? CACHED_BY_KIND[key] : undefined;
      if (cached) {
        const marks = await cachedMarks(cached, namespace, ref.name, spend);
        // Cached entries keep their UID: an owner of another UID is not this one.
        if (marks === null || (ref.uid && marks.uid && marks.uid !== ref.uid)) return { found: "no" };
        return { found: "yes", marks, what };
      }
      const cluster = Object.hasOwn(CLUSTER_PATHS, key) ? CLUSTER_PATHS[key] : undefined;
      if (cluster) {
        const o = await readObject(cluster.path, "", ref.name, spend, ref.uid);
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
      const o = await readObject(path, namespace, ref.name, spend, ref.uid);
      if (o === null) return { found: "no" };
      const template = podSpecOf(RESOURCE_OF[ref.kind] as string, o);
      return { found: "yes", marks: marksOfMeta(template?.meta ?? o.metadata), what };
    };

  /** The RoleBindings of every namespace that name `account` of `namespace` (listed a page at a time). */
  const bindingsOf =
    (spend: () => void) =>
    async (namespace: string, account: string): Promise<{ marks: Marks; what: string }[]> => {
      const found: { marks: Marks; what: string }[] = [];
      let token: string | undefined;
      // One direct read of the budget, however many pages: the review's deadline bounds the listing.
      spend();
      do {
        const query = new URLSearchParams({ limit: "500", ...(token ? { continue: token } : {}) });
        const res = await client.fetch(`/apis/rbac.authorization.k8s.io/v1/rolebindings?${query}`, {
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
    };

  const overrides = new Map<string, { allowed: boolean; until: number }>();
  const canOverride = async (user: UserInfo, namespace: string) => {
    // Hashed: the user info comes from the caller and may be large.
    const key = new Bun.CryptoHasher("sha256")
      .update(JSON.stringify([user.username, user.uid, user.groups, user.extra, namespace]))
      .digest("hex");
    const hit = overrides.get(key);
    if (hit && hit.until > Date.now()) return hit.allowed;
    const r = await client.authorization.createSubjectAccessReview({
      body: {
        spec: {
          ...(user.username ? { user: user.username } : {}),
          ...(user.uid ? { uid: user.uid } : {}),
          ...(user.groups ? { groups: user.groups } : {}),
          ...(user.extra ? { extra: user.extra } : {}),
          resourceAttributes: {
            group: "svc.dev",
            resource: "compartmentoverrides",
            verb: "force",
            namespace,
          },
        },
      },
    });
    const allowed = r.status?.allowed === true;
    if (overrides.size >= OVERRIDE_CACHE_MAX) overrides.clear();
    overrides.set(key, { allowed, until: Date.now() + OVERRIDE_TTL_MS });
    return allowed;
  };

  /**
   * One decision of either webhook: `work` within `ms` (past it, or on an error, the request is refused
   * with why), counted under `label`, and logged, an override as a warning and a refusal as `refused`.
   */
  const decided = async <V extends ReadVerdict>(
    work: (spend: () => void) => Promise<V>,
    ms: number,
    names: { failed: (why: string) => string; refused: string; passed: string; label: () => string },
    about: { user: unknown; groups: unknown; operation: string; object: string; uid?: unknown },
  ): Promise<V | Verdict> => {
    const started = performance.now();
    let verdict: V | Verdict;
    try {
      verdict = await withDeadline(work(budget()), ms);
    } catch (e) {
      verdict = {
        allowed: false,
        decision: "refused",
        message: names.failed((e as Error).message),
      };
    }
    // Metric label values stay few: anything else a caller sends is counted as "other".
    metrics?.review(names.label(), verdict.decision, (performance.now() - started) / 1000);
    const { groups } = about;
    const fields = {
      decision: verdict.decision,
      user: clip(about.user),
      groups: Array.isArray(groups) ? groups.slice(0, 50).map((g) => clip(g)) : clip(groups),
      operation: about.operation,
      object: about.object,
      compartment: "compartment" in verdict && verdict.compartment ? clip(verdict.compartment) : undefined,
      ...(about.uid !== undefined ? { uid: clip(about.uid) } : {}),
      message: clip(verdict.message, 1000),
    };
    if (verdict.decision === "override") alog.warn("compartment override", fields);
    else if (refusal(verdict)) alog.info(names.refused, fields);
    else alog.debug(names.passed, fields);
    return verdict;
  };

  const decide = (request: AdmissionRequest) =>
    decided(
      (spend) =>
        review(request, {
          targetMarks: targetMarks(spend),
          entry: (kind, namespace, name) => cachedMarks(kind, namespace, name, spend),
          lookup: lookup(spend),
          bindingsOf: bindingsOf(spend),
          canOverride,
          unlabeled: config.unlabeledPods,
        }),
      DECIDE_MS,
      {
        failed: (why) => `svc admission: cannot decide (${why}); refused`,
        refused: "refused",
        passed: "allowed",
        label: () => reviewLabel(request),
      },
      {
        user: request.userInfo?.username,
        groups: request.userInfo?.groups,
        operation: operationOf(request.operation, request.resource?.resource, request.subResource),
        object: `${clip(request.namespace)}/${clip(request.name)}`,
        uid: request.uid,
      },
    );

  /** The authorization webhook's reads (authorize.ts), logged and counted as the reviews are. */
  const authorize = async (spec: AccessReviewSpec): Promise<{ answer: AccessAnswer; reason: string }> => {
    const a = spec.resourceAttributes;
    const verdict = await decided(
      (spend) =>
        decideRead(spec, {
          targetMarks: targetMarks(spend),
          entry: (kind, namespace, name) => cachedMarks(kind, namespace, name, spend),
          canOverride,
          unlabeled: config.unlabeledReads,
        }),
      AUTHORIZE_MS,
      {
        failed: (why) => `svc authorization: cannot decide (${why}); denied`,
        refused: "read denied",
        passed: "no opinion",
        label: () => {
          const key = guardedRead(spec);
          if (key === IMPERSONATE) return "impersonate serviceaccounts";
          if (key === CLEARANCE) return "speaks for";
          return key ? `read ${key.replace(/\/$/, "")}` : "read other";
        },
      },
      {
        user: spec.user,
        groups: spec.groups,
        operation: operationOf(a?.verb, a?.resource, a?.subresource),
        object: `${clip(a?.namespace)}/${clip(a?.name)}`,
      },
    );
    const answer: AccessAnswer =
      verdict.decision === "speaks_for" ? "allow" : refusal(verdict) ? "deny" : "none";
    return { answer, reason: verdict.message };
  };

  let server: ReturnType<typeof startAdmissionServer>;
  try {
    server = startAdmissionServer({
      address: config.address,
      tls,
      decide,
      authorize,
      ready,
      onBadRequest: (message) => alog.warn("bad admission request", { error: message }),
    });
  } catch (e) {
    for (const cache of caches.values()) cache.stop();
    throw e;
  }
  const certs = watchTlsPair(
    config.certFile,
    config.keyFile,
    (pair) => {
      server.useCertificate(pair);
      alog.info("serving certificate reloaded", { cert_file: config.certFile });
    },
    (message) => alog.error("serving certificate", { error: message, cert_file: config.certFile }),
  );
  alog.info("admission webhook", {
    address: `${config.address.host || "0.0.0.0"}:${server.port}`,
    path: "/validate",
    authorize_path: "/authorize",
    cluster: client.server,
    credentials: client.from,
    unlabeled_pods: config.unlabeledPods,
    unlabeled_reads: config.unlabeledReads,
  });
  return {
    port: server.port,
    async close() {
      certs.close();
      for (const cache of caches.values()) cache.stop();
      await server.stop();
    },
  };
}

/** "CONNECT pods/exec", "get secrets": what a logged decision was about. */
const operationOf = (verb: unknown, resource: unknown, subresource: unknown) =>
  `${clip(verb)} ${clip(resource)}${subresource ? `/${clip(subresource)}` : ""}`;

/** A decision that refuses (an admission review) or denies (a read); no opinion refuses nothing. */
const refusal = (v: ReadVerdict): boolean => "allowed" in v && !v.allowed;

function withDeadline<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms / 1000}s`)), ms);
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}
