/**
 * The svc-proxy configuration (docs/proxy-configuration.md) as valibot schemas: structure, types and every
 * default. Rules that relate fields to each other live in rules.ts.
 */
import * as v from "valibot";

const got = (input: unknown) => (input === undefined ? "nothing" : JSON.stringify(input));
const str = (what: string) => v.string((i) => `expected ${what}, got ${got(i.input)}`);
const nonEmpty = (what: string) => v.pipe(str(what), v.minLength(1, `must not be empty (expected ${what})`));
const bool = () => v.boolean((i) => `expected true or false, got ${got(i.input)}`);
const oneOf = <T extends string>(values: readonly T[]) =>
  v.picklist(values, (i) => `invalid value ${got(i.input)} (allowed: ${values.join(", ")})`);
const duration = (fallback: string) => v.optional(str(`a Go duration such as ${fallback}`), fallback);
const count = (fallback: number) =>
  v.optional(
    v.pipe(
      v.number((i) => `expected a whole number, got ${got(i.input)}`),
      v.integer((i) => `expected a whole number, got ${got(i.input)}`),
      v.minValue(0, (i) => `must not be negative, got ${got(i.input)}`),
    ),
    fallback,
  );
const patterns = v.optional(v.array(str("a SPIFFE ID pattern (Go regular expression)")), []);

const MODES = ["client", "server", "central"] as const;
const PROTOCOLS = ["http", "tcp", "mqtt"] as const;
const OVERFLOW_POLICIES = ["reject", "drop-oldest", "drop-newest"] as const;
const MIDDLEWARE_TYPES = ["notary-query", "witness", "openai", "dummy", "buffer"] as const;
const STORAGE_TYPES = ["in-memory", "sqlite"] as const;

export const DEFAULT_METRICS_ADDR = ":7600";
/** handshake bounds the TLS handshake of every mTLS listener (HTTP, TCP and MQTT alike). */
export const DEFAULT_TIMEOUTS = { read: "15s", write: "60s", idle: "120s", handshake: "10s" } as const;
export const DEFAULT_BUFFER_MAX_BYTES = 33_554_432;
/** The buffer's reconnect backoff when none (or zero) is given. */
export const DEFAULT_BACKOFF = { initial: "1s", max: "30s" } as const;

export const Middleware = v.variant(
  "type",
  [
    v.object({ type: v.literal("notary-query") }),
    v.object({ type: v.literal("witness") }),
    v.object({ type: v.literal("openai"), allowUnknown: v.optional(bool(), false) }),
    v.object({ type: v.literal("dummy"), message: v.optional(str("a string"), "") }),
    v.object({
      type: v.literal("buffer"),
      storage: v.optional(
        v.object({
          type: v.optional(oneOf(STORAGE_TYPES), "in-memory"),
          path: v.optional(nonEmpty("a database file path")),
          "max-bytes": count(DEFAULT_BUFFER_MAX_BYTES),
          "max-messages": count(0),
          "max-ttl": duration("0s"),
        }),
        {},
      ),
      "overflow-policy": v.optional(oneOf(OVERFLOW_POLICIES), "reject"),
      "reconnect-backoff": v.optional(
        v.object({ initial: duration(DEFAULT_BACKOFF.initial), max: duration(DEFAULT_BACKOFF.max) }),
        {},
      ),
    }),
  ],
  (i) => `unknown middleware type ${got(i.input)} (allowed: ${MIDDLEWARE_TYPES.join(", ")})`,
);

/** A party reached over SPIFFE mTLS: its SPIFFE ID and the https:// URL of its listener. */
const Peer = v.object({
  spiffe_id: nonEmpty("a SPIFFE ID"),
  url: nonEmpty("an https:// URL"),
});

export const Listener = v.object({
  name: nonEmpty("a listener name"),
  address: nonEmpty("a host:port bind address"),
  mode: oneOf(MODES),
  protocol: v.optional(oneOf(PROTOCOLS), "http"),
  target: v.object({ url: nonEmpty("a URL with scheme and host"), spiffe_ids: patterns }, (i) =>
    i.input === undefined ? "required field is missing" : `expected an object with url, got ${got(i.input)}`,
  ),
  source: v.optional(v.object({ spiffe_ids: patterns }), {}),
  timeouts: v.optional(
    v.object({
      read: duration(DEFAULT_TIMEOUTS.read),
      write: duration(DEFAULT_TIMEOUTS.write),
      idle: duration(DEFAULT_TIMEOUTS.idle),
      handshake: duration(DEFAULT_TIMEOUTS.handshake),
    }),
    {},
  ),
  connection: v.optional(
    v.object({ disable_keepalive: v.optional(bool(), false), http2: v.optional(bool(), false) }),
    {},
  ),
  middlewares: v.optional(v.array(Middleware), []),
});

export const Config = v.object({
  // Required unless the proxy serves only the admission webhook (rules.ts, requiredSections).
  spiffe: v.optional(
    v.object(
      { workload_socket_path: nonEmpty("a Workload API address such as unix:///run/spire/agent.sock") },
      // The same message stands for the object and its missing key: say which.
      (i) =>
        i.input === undefined
          ? "required field is missing"
          : `expected an object with workload_socket_path, got ${got(i.input)}`,
    ),
  ),
  listeners: v.optional(
    v.array(Listener, (i) => `expected a list of listeners, got ${got(i.input)}`),
    [],
  ),
  metricsAddr: v.optional(str(`a host:port address, "0" to disable`), DEFAULT_METRICS_ADDR),
  keylog: v.optional(str("a file path"), ""),
  notary: v.optional(
    v.object({
      enable: v.optional(bool(), false),
      database: v.optional(
        v.object({
          path: v.optional(str("a file path"), ""),
          url: v.optional(str("a postgres:// URL"), ""),
          password_file: v.optional(str("a file path"), ""),
          pool_size: v.optional(v.number(`expected a number`), 10),
        }),
        {},
      ),
      witnesses: v.optional(
        v.array(Peer, (i) => `expected a list of witnesses, got ${got(i.input)}`),
        [],
      ),
      push_interval: duration("10s"),
    }),
    {},
  ),
  witness: v.optional(
    v.object({
      database: nonEmpty("the path of the witness's SQLite file"),
      logs: v.array(
        v.object({
          spiffe_id: nonEmpty("the notary's SPIFFE ID"),
          url: v.optional(str("an https:// URL"), ""),
        }),
        (i) => `expected a list of logs (the notaries followed), got ${got(i.input)}`,
      ),
      poll_interval: duration("30s"),
    }),
  ),
  admission: v.optional(
    v.object({
      address: v.optional(str("a host:port bind address"), ":8443"),
      cert_file: nonEmpty("the path of the serving certificate (PEM)"),
      key_file: nonEmpty("the path of the serving certificate's private key (PEM)"),
      unlabeled_pods: v.optional(oneOf(["deny", "allow"] as const), "deny"),
      unlabeled_reads: v.optional(oneOf(["deny", "allow"] as const), "allow"),
      kubeconfig: v.optional(str("a kubeconfig path"), ""),
    }),
  ),
});

export type ConfigInput = v.InferOutput<typeof Config>;
export type ListenerInput = v.InferOutput<typeof Listener>;
export type MiddlewareInput = ListenerInput["middlewares"][number];
