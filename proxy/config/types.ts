/**
 * The resolved proxy configuration that validateConfig (validate.ts) returns and the proxy runs on:
 * addresses, URLs and durations parsed, every default filled in.
 */
import type { Timeouts } from "../timeouts.ts";
import type { ConfigInput, ListenerInput, MiddlewareInput } from "./schema.ts";

export interface HostPort {
  host: string;
  port: number;
}

export interface ListenerConfig {
  name: string;
  address: HostPort;
  mode: ListenerInput["mode"];
  protocol: ListenerInput["protocol"];
  target: URL;
  /** True when callers arrive over SPIFFE mTLS and are checked against sourceIds (server and central modes). */
  callerMtls: boolean;
  /** True when the hop to the target is SPIFFE mTLS (client and central modes with https/tls/mqtts). */
  targetMtls: boolean;
  sourceIds: string[];
  targetIds: string[];
  timeouts: Timeouts;
  disableKeepalive: boolean;
  /** HTTP/2 (gRPC) to callers, beside HTTP/1.1, and to the target (docs/proxy-http.md, "gRPC and HTTP/2"). */
  http2: boolean;
  middlewares: MiddlewareInput[];
  /** The buffer middleware's options, parsed once (MQTT listeners with one; docs/proxy-mqtt.md). */
  buffer: BufferOptions | undefined;
}

/** The buffer middleware's options in working units; zero values already defaulted. */
export interface BufferOptions {
  maxBytes: number;
  /** 0: no count limit. */
  maxMessages: number;
  /** 0: no expiry. */
  maxTtlMs: number;
  overflow: "reject" | "drop-oldest" | "drop-newest";
  backoffInitialMs: number;
  backoffMaxMs: number;
  /** timeouts.idle: an upstream connection with nothing to send is closed after this long. */
  idleMs: number;
  /** timeouts.read: a client connection must send its CONNECT within this long. */
  connectMs: number;
  /** storage.path of storage.type sqlite; undefined in memory. */
  path?: string;
}

export interface AdmissionConfig {
  address: HostPort;
  certFile: string;
  keyFile: string;
  unlabeledPods: "deny" | "allow";
  /** Named reads of an unmarked Secret, ConfigMap or pod log (the authorization webhook). */
  unlabeledReads: "deny" | "allow";
  kubeconfig: string | undefined;
}

/** Where the notary keeps its records: an SQLite file (one replica) or PostgreSQL (any number). */
export type NotaryDatabase =
  | { kind: "sqlite"; path: string }
  | { kind: "postgres"; url: string; passwordFile: string | undefined; poolSize: number };

/** A notary or a witness, reached over SPIFFE mTLS at `url` and required to present `spiffeId`. */
export interface WitnessPeer {
  spiffeId: string;
  url: URL;
}

/** The witness role (docs/notary.md, "Witnesses"): the logs it follows, polled when a URL is given. */
export interface WitnessConfig {
  database: string;
  logs: { spiffeId: string; url: URL | undefined }[];
  pollMs: number;
}

export interface ProxyConfig {
  /** Empty when the proxy needs no SPIFFE identity (it serves only the admission webhook). */
  workloadApi: string;
  admission: AdmissionConfig | undefined;
  metricsAddr: HostPort | undefined;
  keylog: string | undefined;
  notary: {
    enable: boolean;
    database: NotaryDatabase | undefined;
    /** The witnesses the notary pushes its checkpoints to. */
    witnesses: WitnessPeer[];
    pushIntervalMs: number;
  };
  witness: WitnessConfig | undefined;
  listeners: ListenerConfig[];
  /** The document with defaults filled in, as `-check` prints it. */
  effective: ConfigInput;
}

/** How a check reports a problem: the path of the field and what is wrong with it. */
export type Problem = (path: string, message: string) => void;
