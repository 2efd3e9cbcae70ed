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

/** A counter or gauge registered in `registry` (every metric here is one). */
const counter = (registry: Registry, name: string, help: string, labelNames: string[] = []) =>
  new Counter({ name, help, labelNames, registers: [registry] });
const gauge = (registry: Registry, name: string, help: string, labelNames: string[] = []) =>
  new Gauge({ name, help, labelNames, registers: [registry] });

export interface AdmissionMetrics {
  review(subresource: string, decision: string, seconds: number): void;
  /** A review read an object (of a cached kind) the watch had not delivered yet. */
  cacheMiss(kind: string): void;
}

export class ProxyMetrics {
  readonly registry = new Registry();
  private readonly build = gauge(
    this.registry,
    "svc_proxy_build_info",
    "Always 1; the labels say which build of svc-proxy runs",
    ["version", "commit"],
  );

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
  private readonly connections = counter(
    this.registry,
    "svc_proxy_connections_total",
    "Connections accepted by a listener (after SPIFFE authentication in server and central modes)",
    ["listener"],
  );
  private readonly requests = counter(
    this.registry,
    "svc_proxy_http_requests_total",
    "HTTP requests answered, by status code",
    ["listener", "code"],
  );
  private readonly duration = new Histogram({
    name: "svc_proxy_http_request_duration_seconds",
    help: "Time from receiving a request to finishing its response",
    labelNames: ["listener"],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [this.registry],
  });
  private readonly bytes = counter(
    this.registry,
    "svc_proxy_http_body_bytes_total",
    "HTTP body bytes carried: direction=request (caller to target) or response",
    ["listener", "direction"],
  );
  private readonly denied = counter(
    this.registry,
    "svc_proxy_denied_total",
    "Peers refused: side=source (callers) or target (upstreams), reason=the failure code",
    ["listener", "side", "reason"],
  );
  private readonly notary = counter(
    this.registry,
    "svc_proxy_notary_operations_total",
    "Notary operations: operation=statement (issued), log (exchange stored), receipt (signed and stored); result=ok or the failure code",
    ["operation", "result"],
  );
  private readonly witnessCheckpoints = counter(
    this.registry,
    "svc_proxy_witness_checkpoints_total",
    "Checkpoints the witness was given (pushed or polled): log=the notary's SPIFFE ID (unknown for a log it does not follow), result=cosigned, stale (409: another size held), old (400: a smaller checkpoint signed before the one held), invalid, unknown_log, forbidden (pushed by another than the log), cut, inconsistent, refused (a log refused since a cut or inconsistency)",
    ["log", "result"],
  );
  private readonly witnessPushes = counter(
    this.registry,
    "svc_proxy_notary_witness_pushes_total",
    "The notary's checkpoints pushed to its witnesses: witness=its SPIFFE ID, result=cosigned, refused (the witness refused the checkpoint) or failed (unreachable, or an answer that does not verify)",
    ["witness", "result"],
  );
  private readonly relayedBytes = counter(
    this.registry,
    "svc_proxy_stream_bytes_total",
    "Bytes carried by finished TCP and MQTT connections: direction=request (caller to target) or response",
    ["listener", "direction"],
  );
  private readonly streamFailures = counter(
    this.registry,
    "svc_proxy_stream_failures_total",
    "TCP and MQTT connections ended by a fault: reason=malformed (an MQTT packet), error (a socket error or reset on either side), target_unreachable (the target could not be reached)",
    ["listener", "reason"],
  );
  private readonly bufferMessages = gauge(
    this.registry,
    "svc_proxy_mqtt_buffer_messages",
    "Messages held in the MQTT publish buffer (all sessions of the listener)",
    ["listener"],
  );
  private readonly http2Ended = counter(
    this.registry,
    "svc_proxy_http2_connections_ended_total",
    "Caller HTTP/2 connections ended for abuse: reason=control_flood (PING and SETTINGS beyond the budget), rapid_reset (streams opened and reset faster than the runtime allows), protocol_error (a frame the HTTP/2 framing refused, such as CONTINUATION without end)",
    ["listener", "reason"],
  );
  private readonly chatStreams = counter(
    this.registry,
    "svc_proxy_openai_streams_total",
    "Streamed chat completions through the openai middleware, by how they ended: done ([DONE] sent), closed (ended without [DONE]), caller_gone, and the failures target_error (an error event from the target), invalid_event, too_large, target_failed (broken off or cut mid-event), stalled (timeouts.idle without an event), not_sse (the target did not answer with text/event-stream), notary_unavailable",
    ["listener", "end"],
  );
  private readonly bufferBytes = gauge(
    this.registry,
    "svc_proxy_mqtt_buffer_bytes",
    "Payload bytes held in the MQTT publish buffer (all sessions of the listener)",
    ["listener"],
  );
  private readonly bufferDropped = counter(
    this.registry,
    "svc_proxy_mqtt_buffer_dropped_total",
    "Messages the MQTT publish buffer did not deliver: reason=overflow (evicted or discarded by the overflow policy), oversized, expired (max-ttl), rejected (publish refused by overflow-policy reject, connection closed), refused (the target's PUBACK carried an error reason code, the message could not be encoded for it, or the target refused its publisher's credentials while later messages waited), storage (publish refused because storage.path could not be written, connection closed)",
    ["listener", "reason"],
  );
  private readonly bufferDelivered = counter(
    this.registry,
    "svc_proxy_mqtt_buffer_delivered_total",
    "Messages the MQTT publish buffer delivered (QoS 1: acknowledged by the target; QoS 0: written)",
    ["listener"],
  );
  private readonly bufferConnects = counter(
    this.registry,
    "svc_proxy_mqtt_buffer_connects_total",
    "Connection attempts of the MQTT publish buffer to its target: result=ok (CONNACK success) or failed",
    ["listener", "result"],
  );
  private readonly bufferStoredMessages = gauge(
    this.registry,
    "svc_proxy_mqtt_buffer_stored_messages",
    "Messages in the MQTT publish buffer's storage.path (storage.type sqlite; all sessions of the listener)",
    ["listener"],
  );
  private readonly bufferStoredBytes = gauge(
    this.registry,
    "svc_proxy_mqtt_buffer_stored_bytes",
    "Payload bytes in the MQTT publish buffer's storage.path (storage.type sqlite; all sessions of the listener)",
    ["listener"],
  );
  private readonly bufferReplayed = counter(
    this.registry,
    "svc_proxy_mqtt_buffer_replayed_total",
    "Messages the MQTT publish buffer read back from storage.path at start, to be delivered again",
    ["listener"],
  );
  private readonly bufferStorageFailures = counter(
    this.registry,
    "svc_proxy_mqtt_buffer_storage_failures_total",
    "Writes to the MQTT publish buffer's storage.path that failed (a full disk, an I/O error); the publishes they carried were refused",
    ["listener"],
  );
  readonly workloadApiUp = gauge(
    this.registry,
    "svc_proxy_workload_api_up",
    "1 while the Workload API stream of X.509-SVIDs delivers; 0 after it failed, until it delivers again (the proxy serves with its last SVID meanwhile)",
  );
  readonly svidExpiry = gauge(
    this.registry,
    "svc_proxy_svid_expiry_timestamp_seconds",
    "When the current X.509-SVID expires (Unix seconds)",
  );

  private readonly admissionReviews = counter(
    this.registry,
    "svc_proxy_admission_reviews_total",
    "Admission reviews answered, by subresource (or, for objects, resource) and decision (allowed, refused, override, unlabeled)",
    ["subresource", "decision"],
  );
  private readonly admissionDuration = new Histogram({
    name: "svc_proxy_admission_review_duration_seconds",
    help: "Time to decide an admission review",
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1],
    registers: [this.registry],
  });
  private readonly admissionCacheMisses = counter(
    this.registry,
    "svc_proxy_admission_cache_misses_total",
    "Objects a review needed that the watch had not delivered yet, read from the API server instead, by kind",
    ["kind"],
  );

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
      chatStream: (end) => this.chatStreams.inc({ listener, end }),
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

  witnessCheckpoint(log: string, result: string): void {
    this.witnessCheckpoints.inc({ log, result });
  }

  witnessPush(witness: string, result: "cosigned" | "refused" | "failed"): void {
    this.witnessPushes.inc({ witness, result });
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
