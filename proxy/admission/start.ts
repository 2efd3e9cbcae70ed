/**
 * The admission webhook of svc-proxy (the `admission:` block, docs/admission.md), put together: metadata
 * caches of the kinds in CACHED_KINDS fed by watches, the cluster reads and decisions (cluster-reads.ts,
 * decisions.ts), the override check (override.ts), and the HTTPS server (server.ts) with its certificate
 * reloaded when its files change.
 */
import { MarksCache } from "../../lib/kube/marks-cache.ts";
import type { AdmissionConfig } from "../config/types.ts";
import type { Logger } from "../log.ts";
import type { AdmissionMetrics } from "../metrics.ts";
import { CACHED, ClusterReads } from "./cluster-reads.ts";
import { decisions } from "./decisions.ts";
import { OverrideCheck } from "./override.ts";
import { startAdmissionServer } from "./server.ts";
import { readTlsPair, watchTlsPair } from "./tls-files.ts";

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

  const { decide, authorize } = decisions({
    reads: new ClusterReads(client, caches, metrics),
    canOverride: new OverrideCheck(client).canOverride,
    unlabeledPods: config.unlabeledPods,
    unlabeledReads: config.unlabeledReads,
    metrics,
    log: alog,
  });

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
