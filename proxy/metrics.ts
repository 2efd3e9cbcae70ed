/**
 * Prometheus metrics at metricsAddr (GET /metrics), labelled by listener, on prom-client. Denials are
 * counted by side and by reason code, never by peer ID, so that label values stay few. Loaded only when
 * metricsAddr is set (proxy/runtime.ts); without it the listeners report to nothing.
 *
 * Of prom-client's default metrics only the process_* ones are registered: its nodejs_* collectors
 * read V8 and libuv figures that Bun does not have (event-loop lag reads NaN) and poll a timer.
 */
import { createServer, type Server } from "node:http";
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import processResidentMemory from "prom-client/lib/metrics/osMemoryHeap.js";
import processCpuTotal from "prom-client/lib/metrics/processCpuTotal.js";
import processMaxFileDescriptors from "prom-client/lib/metrics/processMaxFileDescriptors.js";
import processOpenFileDescriptors from "prom-client/lib/metrics/processOpenFileDescriptors.js";
import processStartTime from "prom-client/lib/metrics/processStartTime.js";
import { buildInfo } from "../lib/build-info.ts";
import type { HostPort } from "./config/types.ts";
import type { ListenerEvents } from "./listener.ts";

export interface AdmissionMetrics {
  review(subresource: string, decision: string, seconds: number): void;
  /** A review read an object (of a cached kind) the watch had not delivered yet. */
  cacheMiss(kind: string): void;
}

export class ProxyMetrics {
  readonly registry = new Registry();
  private readonly build = new Gauge({
    name: "svc_proxy_build_info",
    help: "Always 1; the labels say which build of svc-proxy runs",
    labelNames: ["version", "commit"],
    registers: [this.registry],
  });

  constructor() {
    for (const collect of [
      processCpuTotal,
      processStartTime,
      processResidentMemory,
      processOpenFileDescriptors,
      processMaxFileDescriptors,
    ])
      collect(this.registry, {});
    const { version, commit } = buildInfo();
    this.build.set({ version, commit }, 1);
  }
  private readonly connections = new Counter({
    name: "svc_proxy_connections_total",
    help: "Connections accepted by a listener (after SPIFFE authentication in server and central modes)",
    labelNames: ["listener"],
    registers: [this.registry],
  });
  private readonly requests = new Counter({
    name: "svc_proxy_http_requests_total",
    help: "HTTP requests answered, by status code",
    labelNames: ["listener", "code"],
    registers: [this.registry],
  });
  private readonly duration = new Histogram({
    name: "svc_proxy_http_request_duration_seconds",
    help: "Time from receiving a request to finishing its response",
    labelNames: ["listener"],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [this.registry],
  });
  private readonly bytes = new Counter({
    name: "svc_proxy_http_body_bytes_total",
    help: "HTTP body bytes carried: direction=request (caller to target) or response",
    labelNames: ["listener", "direction"],
    registers: [this.registry],
  });
  private readonly denied = new Counter({
    name: "svc_proxy_denied_total",
    help: "Peers refused: side=source (callers) or target (upstreams), reason=the failure code",
    labelNames: ["listener", "side", "reason"],
    registers: [this.registry],
  });
  private readonly notary = new Counter({
    name: "svc_proxy_notary_operations_total",
    help: "Notary operations: operation=statement (issued), log (exchange stored), receipt (signed and stored); result=ok or the failure code",
    labelNames: ["operation", "result"],
    registers: [this.registry],
  });
  private readonly relayedBytes = new Counter({
    name: "svc_proxy_stream_bytes_total",
    help: "Bytes carried by finished TCP and MQTT connections: direction=request (caller to target) or response",
    labelNames: ["listener", "direction"],
    registers: [this.registry],
  });
  private readonly streamFailures = new Counter({
    name: "svc_proxy_stream_failures_total",
    help: "TCP and MQTT connections ended by a fault: reason=malformed (an MQTT packet), error (a socket error or reset on either side), target_unreachable (the target could not be reached)",
    labelNames: ["listener", "reason"],
    registers: [this.registry],
  });
  private readonly bufferMessages = new Gauge({
    name: "svc_proxy_mqtt_buffer_messages",
    help: "Messages held in the MQTT publish buffer (all sessions of the listener)",
    labelNames: ["listener"],
    registers: [this.registry],
  });
  private readonly http2Ended = new Counter({
    name: "svc_proxy_http2_connections_ended_total",
    help: "Caller HTTP/2 connections ended for abuse: reason=control_flood (PING and SETTINGS beyond the budget), rapid_reset (streams opened and reset faster than the runtime allows), protocol_error (a frame the HTTP/2 framing refused, such as CONTINUATION without end)",
    labelNames: ["listener", "reason"],
    registers: [this.registry],
  });
  private readonly bufferBytes = new Gauge({
    name: "svc_proxy_mqtt_buffer_bytes",
    help: "Payload bytes held in the MQTT publish buffer (all sessions of the listener)",
    labelNames: ["listener"],
    registers: [this.registry],
  });
  private readonly bufferDropped = new Counter({
    name: "svc_proxy_mqtt_buffer_dropped_total",
    help: "Messages the MQTT publish buffer did not deliver: reason=overflow (evicted or discarded by the overflow policy), oversized, expired (max-ttl), rejected (publish refused by overflow-policy reject, connection closed), refused (the target's PUBACK carried an error reason code, the message could not be encoded for it, or the target refused its publisher's credentials while later messages waited), storage (publish refused because storage.path could not be written, connection closed)",
    labelNames: ["listener", "reason"],
    registers: [this.registry],
  });
  private readonly bufferDelivered = new Counter({
    name: "svc_proxy_mqtt_buffer_delivered_total",
    help: "Messages the MQTT publish buffer delivered (QoS 1: acknowledged by the target; QoS 0: written)",
    labelNames: ["listener"],
    registers: [this.registry],
  });
  private readonly bufferConnects = new Counter({
    name: "svc_proxy_mqtt_buffer_connects_total",
    help: "Connection attempts of the MQTT publish buffer to its target: result=ok (CONNACK success) or failed",
    labelNames: ["listener", "result"],
    registers: [this.registry],
  });
  private readonly bufferStoredMessages = new Gauge({
    name: "svc_proxy_mqtt_buffer_stored_messages",
    help: "Messages in the MQTT publish buffer's storage.path (storage.type sqlite; all sessions of the listener)",
    labelNames: ["listener"],
    registers: [this.registry],
  });
  private readonly bufferStoredBytes = new Gauge({
    name: "svc_proxy_mqtt_buffer_stored_bytes",
    help: "Payload bytes in the MQTT publish buffer's storage.path (storage.type sqlite; all sessions of the listener)",
    labelNames: ["listener"],
    registers: [this.registry],
  });
  private readonly bufferReplayed = new Counter({
    name: "svc_proxy_mqtt_buffer_replayed_total",
    help: "Messages the MQTT publish buffer read back from storage.path at start, to be delivered again",
    labelNames: ["listener"],
    registers: [this.registry],
  });
  private readonly bufferStorageFailures = new Counter({
    name: "svc_proxy_mqtt_buffer_storage_failures_total",
    help: "Writes to the MQTT publish buffer's storage.path that failed (a full disk, an I/O error); the publishes they carried were refused",
    labelNames: ["listener"],
    registers: [this.registry],
  });
  readonly workloadApiUp = new Gauge({
    name: "svc_proxy_workload_api_up",
    help: "1 while the Workload API stream of X.509-SVIDs delivers; 0 after it failed, until it delivers again (the proxy serves with its last SVID meanwhile)",
    registers: [this.registry],
  });
  readonly svidExpiry = new Gauge({
    name: "svc_proxy_svid_expiry_timestamp_seconds",
    help: "When the current X.509-SVID expires (Unix seconds)",
    registers: [this.registry],
  });

  private readonly admissionReviews = new Counter({
    name: "svc_proxy_admission_reviews_total",
    help: "Admission reviews answered, by subresource (or, for objects, resource) and decision (allowed, refused, override, unlabeled)",
    labelNames: ["subresource", "decision"],
    registers: [this.registry],
  });
  private readonly admissionDuration = new Histogram({
    name: "svc_proxy_admission_review_duration_seconds",
    help: "Time to decide an admission review",
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1],
    registers: [this.registry],
  });
  private readonly admissionCacheMisses = new Counter({
    name: "svc_proxy_admission_cache_misses_total",
    help: "Objects a review needed that the watch had not delivered yet, read from the API server instead, by kind",
    labelNames: ["kind"],
    registers: [this.registry],
  });

  readonly admission: AdmissionMetrics = {
    review: (subresource, decision, seconds) => {
      this.admissionReviews.inc({ subresource, decision });
      this.admissionDuration.observe(seconds);
    },
    cacheMiss: (kind) => this.admissionCacheMisses.inc({ kind }),
  };

  forListener(listener: string): ListenerEvents {
    // Children bound once per listener (and per status code): no label object per request. prom-client
    // still hashes the bound labels on each inc and observe.
    const connections = this.connections.labels({ listener });
    const duration = this.duration.labels({ listener });
    const requestBytes = this.bytes.labels({ listener, direction: "request" });
    const responseBytes = this.bytes.labels({ listener, direction: "response" });
    const byStatus = new Map<number, { inc(): void }>();
    return {
      connection: () => connections.inc(),
      request: (status, seconds, toTarget, toCaller) => {
        let requests = byStatus.get(status);
        if (!requests) {
          requests = this.requests.labels({ listener, code: String(status) });
          byStatus.set(status, requests);
        }
        requests.inc();
        duration.observe(seconds);
        if (toTarget > 0) requestBytes.inc(toTarget);
        if (toCaller > 0) responseBytes.inc(toCaller);
      },
      denied: (side, reason) => this.denied.inc({ listener, side, reason }),
      relayed: (toTarget, toCaller) => {
        this.relayedBytes.inc({ listener, direction: "request" }, toTarget);
        this.relayedBytes.inc({ listener, direction: "response" }, toCaller);
      },
      failed: (reason) => this.streamFailures.inc({ listener, reason }),
      http2Ended: (reason) => this.http2Ended.inc({ listener, reason }),
      buffer: {
        depth: (messages, bytes) => {
          this.bufferMessages.inc({ listener }, messages);
          this.bufferBytes.inc({ listener }, bytes);
        },
        dropped: (reason) => this.bufferDropped.inc({ listener, reason }),
        delivered: () => this.bufferDelivered.inc({ listener }),
        connect: (result) => this.bufferConnects.inc({ listener, result }),
        stored: (messages, bytes) => {
          this.bufferStoredMessages.inc({ listener }, messages);
          this.bufferStoredBytes.inc({ listener }, bytes);
        },
        replayed: (messages) => this.bufferReplayed.inc({ listener }, messages),
        storageFailed: () => this.bufferStorageFailures.inc({ listener }),
      },
    };
  }

  notaryOperation(operation: "statement" | "log" | "receipt", result: string): void {
    this.notary.inc({ operation, result });
  }

  /**
   * GET /metrics, and the probes: /healthz answers 200 while the process serves; /readyz answers 200
   * when `ready` finds nothing wrong, else 503 with the reason. The server starts once every listener
   * listens and closes first on shutdown, so a draining proxy is not ready.
   */
  serve(addr: HostPort, ready: () => string | undefined = () => undefined): Promise<Server> {
    const server = createServer(async (req, res) => {
      const path = req.url?.split("?")[0];
      if (req.method === "GET" && path === "/metrics") {
        try {
          const text = await this.registry.metrics();
          res.writeHead(200, { "content-type": this.registry.contentType });
          res.end(text);
        } catch (e) {
          res.writeHead(500, { "content-type": "text/plain" });
          res.end(`svc-proxy: metrics could not be collected: ${(e as Error).message}\n`);
        }
      } else if (req.method === "GET" && (path === "/healthz" || path === "/readyz")) {
        const problem = path === "/readyz" ? ready() : undefined;
        res.writeHead(problem ? 503 : 200, { "content-type": "text/plain" });
        res.end(problem ? `not ready: ${problem}\n` : "ok\n");
      } else {
        res.writeHead(404, { "content-type": "text/plain" });
        res.end("svc-proxy: only GET /metrics, /healthz and /readyz are served here\n");
      }
    });
    return new Promise((resolve, reject) => {
      server.once("error", reject);
      server.listen(addr.port, addr.host || undefined, () => resolve(server));
    });
  }
}
