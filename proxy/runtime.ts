import type { Server } from "node:http";
import { X509Source } from "../lib/spiffe/x509-source.ts";
import { openKeyLog } from "../lib/tls/keylog.ts";
import type { HostPort, ListenerConfig, ProxyConfig } from "./config/types.ts";
import type { ListenerDeps, RunningListener } from "./listener.ts";
import type { Logger } from "./log.ts";
import type { ProxyMetrics } from "./metrics.ts";
import { startNotary } from "./notary-service/start.ts";
import { startTcpListener } from "./tcp/listener.ts";

const START: Record<
  ListenerConfig["protocol"],
  (l: ListenerConfig, deps: ListenerDeps) => Promise<RunningListener>
> = {
  // Listeners without middlewares relay on Bun's own sockets; the full path (node:http, middlewares) is
  // loaded only when a listener needs it, speaks HTTP/2, while a key log is written (Bun's sockets cannot
  // log keys), or with the notary on (only the full path removes a target's notary headers: chain.ts).
  http: async (l, deps) =>
    l.middlewares.length === 0 && !deps.keylog && !l.http2 && !deps.notary
      ? (await import("./http/relay/listener.ts")).startRelayListener(l, deps)
      : (await import("./http/full/listener.ts")).startHttpListener(l, deps),
  tcp: startTcpListener,
  // mqtt-packet costs ~20 ms to import: only proxies with an MQTT listener pay it.
  mqtt: async (l, deps) => (await import("./mqtt/listener.ts")).startMqttListener(l, deps),
};

/**
 * A running svc-proxy: one X509Source for the process, shared by every listener; listeners are
 * independent. close() stops accepting, drains in-flight requests within `drainMs`, and releases all.
 */
export interface RunningProxy {
  listeners: Map<string, RunningListener>;
  close(drainMs: number): Promise<void>;
}

export async function startProxy(config: ProxyConfig, log: Logger): Promise<RunningProxy> {
  // prom-client is loaded only when metrics are served.
  const metrics = config.metricsAddr ? new (await import("./metrics.ts")).ProxyMetrics() : undefined;
  // The admission webhook needs no SPIFFE identity: a proxy that serves only it starts without one.
  const admission = config.admission
    ? await (await import("./admission/start.ts")).startAdmission(config.admission, log, metrics?.admission)
    : undefined;
  if (!config.workloadApi) {
    const metricsServer =
      metrics && config.metricsAddr ? await serveMetrics(metrics, config.metricsAddr, log) : undefined;
    return {
      listeners: new Map(),
      async close() {
        metricsServer?.close();
        await admission?.close();
      },
    };
  }
  let source: X509Source | undefined;
  try {
    source = await X509Source.open({
      address: config.workloadApi,
      timeoutMs: 30_000,
      onError: (e) => {
        metrics?.workloadApiUp.set(0);
        let last: string | undefined;
        try {
          last = source?.getX509Svid().notAfter.toISOString();
        } catch {
          // Expired or closed: nothing to serve with; the plain warning below says what failed.
        }
        if (last)
          log.warn("Workload API unavailable; serving with the last SVID", {
            error: e.message,
            expires: last,
          });
        else log.warn("Workload API", { error: e.message });
      },
    });
  } catch (e) {
    await admission?.close();
    throw e;
  }
  const svidChanged = () => {
    metrics?.workloadApiUp.set(1);
    const svid = (source as X509Source).getX509Svid();
    metrics?.svidExpiry.set(svid.notAfter.getTime() / 1000);
    return svid;
  };
  const first = svidChanged();
  log.info("SVID received", { spiffe_id: first.id.uri, expires: first.notAfter.toISOString() });
  source.onUpdate(() => log.info("SVID rotated", { expires: svidChanged().notAfter.toISOString() }));
  const keylog = config.keylog ? openKeyLog(config.keylog) : undefined;
  if (keylog)
    log.warn("TLS key logging is on: whoever holds the file and a capture can decrypt the sessions", {
      keylog: config.keylog,
    });

  const listeners = new Map<string, RunningListener>();
  let metricsServer: Server | undefined;
  let notary: Awaited<ReturnType<typeof startNotary>> | undefined;
  try {
    if (config.notary.enable && config.notary.database)
      notary = await startNotary(config.notary.database, source, log, (op, result) =>
        metrics?.notaryOperation(op, result),
      );
    for (const l of config.listeners) {
      const deps = {
        source,
        log,
        ...(metrics ? { events: metrics.forListener(l.name) } : {}),
        ...(keylog ? { keylog } : {}),
        ...(notary ? { notary: notary.notary } : {}),
      };
      listeners.set(l.name, await START[l.protocol](l, deps));
    }
    const svidSource = source;
    if (metrics && config.metricsAddr)
      // Ready while the SVID is valid; getX509Svid says why not (expired, and the last API error).
      metricsServer = await serveMetrics(metrics, config.metricsAddr, log, () => {
        try {
          svidSource.getX509Svid();
          return undefined;
        } catch (e) {
          return (e as Error).message;
        }
      });
  } catch (e) {
    for (const running of listeners.values()) await running.close(0);
    await notary?.close();
    source.close();
    await admission?.close();
    throw e;
  }
  return {
    listeners,
    async close(drainMs) {
      metricsServer?.close();
      await Promise.all([...listeners.values()].map((l) => l.close(drainMs)));
      await admission?.close();
      await notary?.close();
      keylog?.close();
      source.close();
    },
  };
}

async function serveMetrics(
  metrics: ProxyMetrics,
  addr: HostPort,
  log: Logger,
  ready?: () => string | undefined,
): Promise<Server> {
  const server = await metrics.serve(addr, ready);
  const port = (server.address() as { port: number }).port;
  log.info("metrics", { address: `${addr.host}:${port}`, path: "/metrics" });
  return server;
}
