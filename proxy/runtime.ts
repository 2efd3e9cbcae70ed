import { existsSync } from "node:fs";
import type { Server } from "node:http";
import { SvcError } from "../lib/errors.ts";
import { socketPath } from "../lib/spiffe/address.ts";
import { X509Source } from "../lib/spiffe/x509-source.ts";
import { openKeyLog } from "../lib/tls/keylog.ts";
import type { HostPort, ListenerConfig, ProxyConfig } from "./config/types.ts";
import type { ListenerDeps, RunningListener } from "./listener.ts";
import type { Logger } from "./log.ts";
import type { ProxyMetrics } from "./metrics.ts";
import { startTcpListener } from "./tcp/listener.ts";

const START: Record<
  ListenerConfig["protocol"],
  (l: ListenerConfig, deps: ListenerDeps) => Promise<RunningListener>
> = {
  // Listeners without middlewares relay on Bun's own sockets; the full path (node:http, middlewares) is
  // loaded only when a listener needs it, speaks HTTP/2, while a key log is written (Bun's sockets cannot
  // log keys), or with the notary on (only the full path removes a target's notary headers: chain.ts).
  http: async (l, deps) =>
    l.middlewares.length === 0 && !deps.keylog && !deps.notary
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
  // The probes answer from the start: /readyz says what a starting proxy waits for, and turns ready only
  // when every listener listens.
  let notReady: () => string | undefined = () => "starting";
  const probes =
    metrics && config.metricsAddr
      ? await serveProbes(metrics, config.metricsAddr, () => notReady())
      : undefined;
  const ready = (check: () => string | undefined) => {
    notReady = check;
    if (probes) log.info("metrics", { address: probes.address, path: "/metrics" });
  };
  // The admission webhook needs no SPIFFE identity: a proxy that serves only it starts without one.
  let admission: Awaited<ReturnType<typeof import("./admission/start.ts").startAdmission>> | undefined;
  try {
    admission = config.admission
      ? await (await import("./admission/start.ts")).startAdmission(config.admission, log, metrics?.admission)
      : undefined;
  } catch (e) {
    probes?.server.close();
    throw e;
  }
  if (!config.workloadApi) {
    ready(() => undefined);
    return {
      listeners: new Map(),
      async close() {
        probes?.server.close();
        await admission?.close();
      },
    };
  }
  let source: X509Source | undefined;
  // The Workload API's errors, each logged once until an SVID arrives (a missing socket is retried often).
  let lastError: string | undefined;
  notReady = () =>
    `waiting for an X.509-SVID from the Workload API at ${config.workloadApi}${lastError ? ` (${lastError})` : ""}`;
  const socket = socketPath(config.workloadApi);
  if (socket && !existsSync(socket))
    log.warn("Workload API socket does not exist (yet): waiting for the SPIRE agent", {
      socket,
      check: "spiffe.workload_socket_path, and that the agent's socket directory is mounted here",
    });
  try {
    source = await X509Source.open({
      address: config.workloadApi,
      timeoutMs: 30_000,
      onError: (e) => {
        metrics?.workloadApiUp.set(0);
        if (e.message === lastError) return;
        lastError = e.message;
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
    probes?.server.close();
    await admission?.close();
    throw new SvcError(
      "workload_api",
      `${(e as Error).message}; check spiffe.workload_socket_path (${config.workloadApi}), that the SPIRE agent runs, and that this workload is registered with it`,
    );
  }
  const svidChanged = () => {
    lastError = undefined;
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
  let notary: Awaited<ReturnType<typeof import("./notary-service/start.ts").startNotary>> | undefined;
  let witness: ReturnType<typeof import("./witness/start.ts").startWitness> | undefined;
  notReady = () => "starting the listeners";
  try {
    if (config.witness)
      witness = (await import("./witness/start.ts")).startWitness(config.witness, source, log, (l, result) =>
        metrics?.witnessCheckpoint(l, result),
      );
    if (config.notary.enable && config.notary.database)
      // Loaded only when the notary is on, as the listeners' paths are: a proxy without it never holds
      // its code (JWS and the log's store) in memory.
      notary = await (await import("./notary-service/start.ts")).startNotary(
        config.notary.database,
        source,
        log,
        (op, result) => metrics?.notaryOperation(op, result),
        config.notary,
        (w, result) => metrics?.witnessPush(w, result),
      );
    for (const l of config.listeners) {
      const deps = {
        source,
        log,
        ...(metrics ? { events: metrics.forListener(l.name) } : {}),
        ...(keylog ? { keylog } : {}),
        ...(notary ? { notary: notary.notary } : {}),
        ...(witness ? { witness: witness.witness } : {}),
      };
      listeners.set(l.name, await START[l.protocol](l, deps));
    }
  } catch (e) {
    probes?.server.close();
    for (const running of listeners.values()) await running.close(0);
    await notary?.close();
    witness?.close();
    source.close();
    await admission?.close();
    throw e;
  }
  const svidSource = source;
  // Ready while the SVID is valid; getX509Svid says why not (expired, and the last API error).
  ready(() => {
    try {
      svidSource.getX509Svid();
      return undefined;
    } catch (e) {
      return (e as Error).message;
    }
  });
  return {
    listeners,
    async close(drainMs) {
      probes?.server.close();
      await Promise.all([...listeners.values()].map((l) => l.close(drainMs)));
      await admission?.close();
      await notary?.close();
      witness?.close();
      keylog?.close();
      source.close();
    },
  };
}

/** The metrics and probes server at metricsAddr; a port in use is refused naming the setting. */
async function serveProbes(
  metrics: ProxyMetrics,
  addr: HostPort,
  ready: () => string | undefined,
): Promise<{ server: Server; address: string }> {
  let server: Server;
  try {
    server = await metrics.serve(addr, ready);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new SvcError(
      "usage",
      `metricsAddr: cannot listen on ${addr.host}:${addr.port}: ${code === "EADDRINUSE" ? 'address already in use (choose a free port, or "0" to serve no metrics)' : (e as Error).message}`,
    );
  }
  return { server, address: `${addr.host}:${(server.address() as { port: number }).port}` };
}
