import { marksOfPod, PodCache, type PodMarks } from "../../lib/kube/pod-cache.ts";
import type { AdmissionConfig } from "../config/validate.ts";
import type { Logger } from "../log.ts";
import type { AdmissionMetrics } from "../metrics.ts";
import { type AdmissionRequest, DECIDED, review, type UserInfo, type Verdict } from "./review.ts";
import { startAdmissionServer } from "./server.ts";
import { readTlsPair, watchTlsPair } from "./tls-files.ts";

/**
 * The admission webhook of svc-proxy (the `admission:` block, docs/admission.md): a pod cache fed by a
 * watch, the override permission asked with a SubjectAccessReview (answers kept for OVERRIDE_TTL_MS),
 * one log line per refusal and per override, and metrics.
 */
const OVERRIDE_TTL_MS = 10_000;
const OVERRIDE_CACHE_MAX = 10_000;

/** A log field from the caller's review, cut to 200 characters (a caller may send megabytes). */
const cut = (v: unknown) => {
  const text = typeof v === "string" ? v : (JSON.stringify(v) ?? String(v));
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
};

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
  // Typed calls give up before the API server's webhook timeout (5 s), so that the refusal says why.
  const client = openKubeClient(config.kubeconfig, 3_000);
  const alog = log.with({ component: "admission" });
  const cache = new PodCache(client, {
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
      verdict = await review(request, { podMarks, canOverride, unlabeled: config.unlabeledPods });
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
      user: cut(request.userInfo?.username),
      groups: Array.isArray(groups) ? groups.slice(0, 50).map(cut) : cut(groups),
      operation: `${cut(request.operation)} pods/${cut(sub)}`,
      pod: `${cut(request.namespace)}/${cut(request.name)}`,
      compartment: verdict.compartment,
      uid: cut(request.uid),
      message: verdict.message,
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
