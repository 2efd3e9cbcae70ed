import { marksOfPod, PodCache, type PodMarks } from "../../lib/kube/pod-cache.ts";
import type { AdmissionConfig } from "../config/validate.ts";
import type { Logger } from "../log.ts";
import type { AdmissionMetrics } from "../metrics.ts";
import { type AdmissionRequest, clip, DECIDED, review, type UserInfo, type Verdict } from "./review.ts";
import { startAdmissionServer } from "./server.ts";
import { readTlsPair, watchTlsPair } from "./tls-files.ts";

/**
 * The admission webhook of svc-proxy (the `admission:` block, docs/admission.md): a pod cache fed by a
 * watch, the override permission asked with a SubjectAccessReview (answers kept for OVERRIDE_TTL_MS),
 * one log line per refusal and per override, and metrics.
 */
const OVERRIDE_TTL_MS = 10_000;
/** One deadline for a review's lookups, under the API server's 5 s. */
const DECIDE_MS = 4_000;
const OVERRIDE_CACHE_MAX = 10_000;

export interface RunningAdmission {
  port: number;
  close(): Promise<void>;
}

export async function startAdmission(
  config: AdmissionConfig,
  log: Logger,
  metrics: AdmissionMetrics,
): Promise<RunningAdmission> {
  const tls = readTlsPair(config.certFile, config.keyFile);
  const { openKubeClient } = await import("../../lib/kube/client.ts");
  // A review's lookups give up before the API server's webhook timeout (5 s), so that the refusal says
  // why; the cache's list pages may take longer.
  const client = openKubeClient(config.kubeconfig, 3_000);
  const cacheClient = client.withTimeout(30_000);
  const alog = log.with({ component: "admission" });
  const cache = new PodCache(cacheClient, {
    synced: (pods, ms) => alog.info("pod cache filled", { pods, list_ms: ms }),
    error: (message, retryMs) => alog.warn("pod cache", { error: message, retry_ms: retryMs }),
  });
  cache.start();

  const podMarks = async (namespace: string, name: string): Promise<PodMarks | null> => {
    const cached = cache.get(namespace, name);
    if (cached) return cached;
    metrics.cacheMiss();
    // Not seen yet (just created, or the cache is still filling): read it once.
    const pod = await client.core.readNamespacedPod({ namespace, name }).catch((e: { code?: number }) => {
      if (e.code === 404) return null;
      throw e;
    });
    return pod === null ? null : marksOfPod(pod.metadata);
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

  const decide = async (request: AdmissionRequest): Promise<Verdict> => {
    const started = performance.now();
    let verdict: Verdict;
    try {
      verdict = await withDeadline(
        review(request, { podMarks, canOverride, unlabeled: config.unlabeledPods }),
        DECIDE_MS,
      );
    } catch (e) {
      verdict = {
        allowed: false,
        decision: "refused",
        message: `svc admission: cannot decide (${(e as Error).message}); refused`,
      };
    }
    const sub = typeof request.subResource === "string" ? request.subResource : "";
    // Metric label values stay few: anything else a caller sends is counted as "other".
    metrics.review(DECIDED.has(sub) ? sub : "other", verdict.decision, (performance.now() - started) / 1000);
    const groups = request.userInfo?.groups;
    const fields = {
      decision: verdict.decision,
      user: clip(request.userInfo?.username),
      groups: Array.isArray(groups) ? groups.slice(0, 50).map((g) => clip(g)) : clip(groups),
      operation: `${clip(request.operation)} pods/${clip(sub)}`,
      pod: `${clip(request.namespace)}/${clip(request.name)}`,
      compartment: verdict.compartment && clip(verdict.compartment),
      uid: clip(request.uid),
      message: clip(verdict.message, 1000),
    };
    if (verdict.decision === "override") alog.warn("compartment override", fields);
    else if (!verdict.allowed) alog.info("refused", fields);
    else alog.debug("allowed", fields);
    return verdict;
  };

  let server: ReturnType<typeof startAdmissionServer>;
  try {
    server = startAdmissionServer({
      address: config.address,
      tls,
      decide,
      ready: () => cache.ready,
      onBadRequest: (message) => alog.warn("bad admission request", { error: message }),
    });
  } catch (e) {
    cache.stop();
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
    cluster: client.server,
    credentials: client.from,
    unlabeled_pods: config.unlabeledPods,
  });
  return {
    port: server.port,
    async close() {
      certs.close();
      cache.stop();
      await server.stop();
    },
  };
}

function withDeadline<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms / 1000}s`)), ms);
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}
