/**
 * The rules that relate fields to each other, which the schema (schema.ts) cannot express: addresses,
 * target URLs per mode and protocol, SPIFFE ID patterns, durations, middlewares per protocol, the notary
 * database and the sections a document needs. Each reports every problem it finds and builds its part of
 * the resolved configuration (types.ts).
 */
import { resolve } from "node:path";
import { parseDuration } from "../../lib/duration.ts";
import { parseEndpoint } from "../../lib/spiffe/address.ts";
import { compilePatterns } from "../../lib/spiffe/authorizer.ts";
import { socketHost } from "../../lib/url-host.ts";
import { exists, readable, writableParent } from "./files.ts";
import type { Parts } from "./normalize.ts";
import {
  type ConfigInput,
  DEFAULT_BACKOFF,
  DEFAULT_BUFFER_MAX_BYTES,
  DEFAULT_TIMEOUTS,
  type ListenerInput,
  type MiddlewareInput,
} from "./schema.ts";
import type {
  AdmissionConfig,
  BufferOptions,
  HostPort,
  ListenerConfig,
  NotaryDatabase,
  Problem,
} from "./types.ts";

const TARGET_SCHEMES: Record<ListenerInput["protocol"], { mtls: string; plain: string }> = {
  http: { mtls: "https:", plain: "http:" },
  tcp: { mtls: "tls:", plain: "tcp:" },
  mqtt: { mtls: "mqtts:", plain: "mqtt:" },
};

/** Which roles the proxy takes besides its listeners. */
export interface Roles {
  notary: boolean;
  witness: boolean;
}

const MIDDLEWARE_PROTOCOLS: Record<MiddlewareInput["type"], ListenerInput["protocol"][]> = {
  "notary-query": ["http"],
  witness: ["http"],
  openai: ["http"],
  dummy: ["http"],
  buffer: ["mqtt"],
};

/** Reports each problem into `problems` as "path: message". */
export const reporter =
  (problems: string[]): Problem =>
  (path, message) =>
    problems.push(`${path}: ${message}`);

function parseHostPort(text: string): HostPort | undefined {
  const m = /^(\[[0-9a-fA-F:.]+\]|[^:[\]\s]*):(\d{1,5})$/.exec(text);
  if (!m) return undefined;
  const port = Number(m[2]);
  if (port > 65535) return undefined;
  return { host: socketHost(m[1] as string), port };
}

const badAddress = (address: string) =>
  `invalid address ${JSON.stringify(address)} (allowed: host:port, or :port for all interfaces)`;

export function workloadApi(spiffe: NonNullable<ConfigInput["spiffe"]>, problem: Problem): string {
  try {
    return parseEndpoint(spiffe.workload_socket_path);
  } catch (e) {
    problem("spiffe.workload_socket_path", (e as Error).message);
    return "";
  }
}

export function metricsAddress(text: string, problem: Problem): HostPort | undefined {
  const address = text === "0" ? undefined : parseHostPort(text);
  if (text !== "0" && !address) {
    problem(
      "metricsAddr",
      `invalid address ${JSON.stringify(text)} (allowed: host:port, :port, or "0" to disable)`,
    );
  }
  return address;
}

/** `listed` is the number of listeners in the document. */
export function keylogRules(keylog: string, listed: number, problem: Problem, warnings: string[]): void {
  writableParent("keylog", keylog, problem);
  if (listed === 0)
    warnings.push("keylog: has no effect without listeners (the admission webhook's TLS is not logged)");
}

/**
 * The sections a document needs: listeners (or an admission block), and spiffe for listeners, the notary
 * and the witness.
 */
export function requiredSections(
  doc: Record<string, unknown>,
  listed: number,
  roles: Roles,
  problem: Problem,
): void {
  const noListeners = doc.listeners === undefined || (Array.isArray(doc.listeners) && listed === 0);
  if (noListeners && doc.admission === undefined)
    problem("listeners", "at least one listener is required (or an admission block)");
  if (doc.spiffe === undefined && (listed > 0 || roles.notary || roles.witness))
    problem(
      "spiffe",
      "required field is missing (listeners, the notary and the witness need a SPIFFE identity)",
    );
}

/**
 * The admission block, from its parsed form `a`; when it did not parse, its address (in the document's
 * `raw` block) is still checked: every problem at once.
 */
export function admissionConfig(
  a: ConfigInput["admission"],
  raw: unknown,
  problem: Problem,
): AdmissionConfig | undefined {
  if (!a) {
    const rawAdmission = raw as { address?: unknown } | undefined;
    if (typeof rawAdmission?.address === "string" && !parseHostPort(rawAdmission.address))
      problem("admission.address", badAddress(rawAdmission.address));
    return undefined;
  }
  const address = parseHostPort(a.address);
  if (!address) problem("admission.address", badAddress(a.address));
  readable("admission.cert_file", a.cert_file, problem);
  readable("admission.key_file", a.key_file, problem);
  if (a.kubeconfig) readable("admission.kubeconfig", a.kubeconfig, problem);
  return {
    address: address ?? { host: "", port: 0 },
    certFile: a.cert_file,
    keyFile: a.key_file,
    unlabeledPods: a.unlabeled_pods,
    unlabeledReads: a.unlabeled_reads,
    kubeconfig: a.kubeconfig || undefined,
  };
}

export function notaryDatabase(
  d: NonNullable<ConfigInput["notary"]>["database"],
  enabled: boolean,
  problem: Problem,
): NotaryDatabase | undefined {
  if (d.path && d.url) {
    problem("notary.database", "path (an SQLite file) and url (PostgreSQL) exclude each other: give one");
    return undefined;
  }
  if (d.password_file && !d.url) problem("notary.database.password_file", "goes with url (PostgreSQL) only");
  if (!d.url && d.pool_size !== 10) problem("notary.database.pool_size", "goes with url (PostgreSQL) only");
  if (d.path) {
    writableParent("notary.database.path", d.path, problem);
    return { kind: "sqlite", path: d.path };
  }
  if (d.url) {
    let url: URL | undefined;
    try {
      url = new URL(d.url);
    } catch {
      url = undefined;
    }
    // The URL is never echoed whole: it could hold a password.
    if (!url || !["postgres:", "postgresql:"].includes(url.protocol) || !url.hostname)
      problem("notary.database.url", "expected postgres://user@host[:port]/database");
    else if (url.password)
      problem(
        "notary.database.url",
        "holds a password: put it in password_file or the PGPASSWORD environment variable, so that it is never in the configuration or the logs",
      );
    else if (url.pathname.length <= 1)
      problem("notary.database.url", "names no database (postgres://user@host/database)");
    if (d.password_file) exists("notary.database.password_file", d.password_file, problem);
    if (!Number.isInteger(d.pool_size) || d.pool_size < 1 || d.pool_size > 100)
      problem("notary.database.pool_size", `${d.pool_size} is not a whole number from 1 to 100`);
    return {
      kind: "postgres",
      url: d.url,
      passwordFile: d.password_file || undefined,
      poolSize: d.pool_size,
    };
  }
  if (enabled)
    problem(
      "notary.database.path",
      "required when notary.enable is true (or notary.database.url for PostgreSQL)",
    );
  return undefined;
}

/**
 * The listeners that have the right shape, with their rules checked. `problems` takes the reports of
 * SPIFFE ID patterns, which name their own paths.
 */
export function listenerConfigs(
  listeners: Parts["listeners"],
  roles: Roles,
  problems: string[],
  warnings: string[],
): ListenerConfig[] {
  const problem = reporter(problems);
  const seen = new Map<string, number>();
  const files = new Map<string, string>();
  return listeners.map(([i, l, positions, malformed = new Set()]) => {
    const at = `listeners[${i}]`;
    const first = seen.get(l.name);
    if (malformed.has("name")) {
      // Its schema problem is reported; no name to compare.
    } else if (first !== undefined) {
      problem(
        `${at}.name`,
        `duplicate name ${JSON.stringify(l.name)} (also listeners[${first}].name); names must be unique`,
      );
    } else seen.set(l.name, i);
    const address = parseHostPort(l.address);
    if (!address && !malformed.has("address")) problem(`${at}.address`, badAddress(l.address));
    // The rules below read the mode, protocol or target: a listener with one of them malformed is
    // checked no further (its schema problem is reported).
    const shaped = !malformed.has("mode") && !malformed.has("protocol") && !malformed.has("target");
    const target = shaped ? checkTarget(l, at, problem, warnings) : undefined;
    for (const [field, list] of [
      ["source.spiffe_ids", l.source.spiffe_ids],
      ["target.spiffe_ids", l.target.spiffe_ids],
    ] as const) {
      try {
        compilePatterns(list, `${at}.${field}`);
      } catch (e) {
        problems.push(...(e as Error).message.split("\n"));
      }
    }
    if (shaped) modeWarnings(l, at, target, warnings);
    const timeouts = {
      readMs: timeout(l.timeouts, "read", `${at}.timeouts.read`, problem),
      writeMs: timeout(l.timeouts, "write", `${at}.timeouts.write`, problem),
      idleMs: timeout(l.timeouts, "idle", `${at}.timeouts.idle`, problem),
      handshakeMs: timeout(l.timeouts, "handshake", `${at}.timeouts.handshake`, problem),
    };
    const buffer = shaped ? checkMiddlewares(l, at, roles, problem, warnings, positions) : undefined;
    for (const [k, m] of l.middlewares.entries())
      if (m.type === "buffer" && m.storage.path) {
        const field = `${at}.middlewares[${positions?.[k] ?? k}].storage.path`;
        const other = files.get(resolve(m.storage.path));
        if (other)
          problem(
            field,
            `${JSON.stringify(m.storage.path)} is also ${other}; each buffer needs a file of its own`,
          );
        else files.set(resolve(m.storage.path), field);
      }
    if (shaped && l.connection.http2 && l.protocol !== "http")
      problem(`${at}.connection.http2`, `only http listeners speak HTTP/2, not ${l.protocol}`);
    if (shaped && l.connection.http2 && l.middlewares.some((m) => m.type === "openai"))
      problem(
        `${at}.connection.http2`,
        "the openai middleware reads whole bodies and cannot work on HTTP/2 streams (gRPC); leave http2 off or use another listener",
      );
    return {
      name: l.name,
      address: address ?? { host: "", port: 0 },
      mode: l.mode,
      protocol: l.protocol,
      target: target?.url ?? new URL("invalid:"),
      callerMtls: l.mode !== "client",
      targetMtls: target?.mtls ?? false,
      sourceIds: l.source.spiffe_ids,
      targetIds: l.target.spiffe_ids,
      timeouts,
      disableKeepalive: l.connection.disable_keepalive,
      http2: l.connection.http2,
      middlewares: l.middlewares,
      buffer: buffer && { ...buffer, idleMs: timeouts.idleMs, connectMs: timeouts.readMs },
    } satisfies ListenerConfig;
  });
}

/** Settings that have no effect in the listener's mode, and a mode that lets every workload in. */
function modeWarnings(
  l: ListenerInput,
  at: string,
  target: { mtls: boolean } | undefined,
  warnings: string[],
): void {
  if (l.mode === "client" && l.source.spiffe_ids.length > 0)
    warnings.push(
      `${at}.source.spiffe_ids: has no effect in client mode, where callers connect in plaintext (bind the listener to loopback)`,
    );
  if (l.mode !== "client" && l.source.spiffe_ids.length === 0)
    warnings.push(
      `${at}.source.spiffe_ids: empty: this ${l.mode} listener accepts every workload of the trust domain (list the SPIFFE IDs that may call it)`,
    );
  if (l.mode !== "server" && target && !target.mtls && l.target.spiffe_ids.length > 0)
    warnings.push(
      `${at}.target.spiffe_ids: has no effect: the target ${l.target.url} is not spoken to over SPIFFE mTLS (use https://, tls:// or mqtts:// for that)`,
    );
  if (l.mode === "server" && l.target.spiffe_ids.length > 0)
    warnings.push(
      `${at}.target.spiffe_ids: has no effect in server mode, whose target hop is not SPIFFE mTLS`,
    );
}

// A Go duration in milliseconds: negative is an error; zero selects `fallback` (docs/proxy-configuration.md,
// "Validation": zero never disables a timeout), and `onDefault` is told so that the effective document can
// show it.
export function durationMs(
  text: string,
  fallback: string,
  path: string,
  problem: Problem,
  onDefault = () => {},
): number {
  let ms: number;
  try {
    ms = parseDuration(text);
  } catch (e) {
    problem(path, (e as Error).message);
    return 0;
  }
  if (ms < 0) problem(path, `must not be negative, got ${JSON.stringify(text)}`);
  if (ms !== 0) return ms;
  onDefault();
  return parseDuration(fallback);
}

function timeout(
  t: ListenerInput["timeouts"],
  key: keyof typeof DEFAULT_TIMEOUTS,
  path: string,
  problem: Problem,
): number {
  return durationMs(t[key], DEFAULT_TIMEOUTS[key], path, problem, () => {
    t[key] = DEFAULT_TIMEOUTS[key];
  });
}

function checkTarget(
  l: ListenerInput,
  at: string,
  problem: Problem,
  warnings: string[],
): { url: URL; mtls: boolean } | undefined {
  const path = `${at}.target.url`;
  let url: URL;
  try {
    url = new URL(l.target.url);
  } catch {
    problem(path, `invalid URL ${JSON.stringify(l.target.url)} (expected scheme://host:port)`);
    return undefined;
  }
  if (!url.hostname) {
    problem(path, `${JSON.stringify(l.target.url)} has no host (expected scheme://host:port)`);
    return undefined;
  }
  const schemes = TARGET_SCHEMES[l.protocol];
  const tlsModes = l.mode === "client" || l.mode === "central";
  if (l.protocol === "http") {
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      problem(path, `${JSON.stringify(l.target.url)}: an http listener needs an http:// or https:// target`);
      return undefined;
    }
    if (tlsModes && url.protocol === "http:") {
      warnings.push(
        `${path}: ${l.target.url} is plain HTTP; ${l.mode} mode does not upgrade it to SPIFFE mTLS (use https:// for mTLS)`,
      );
    }
    return { url, mtls: tlsModes && url.protocol === "https:" };
  }
  const want = tlsModes ? schemes.mtls : schemes.plain;
  if (url.protocol !== want) {
    problem(
      path,
      `${JSON.stringify(l.target.url)}: a ${l.protocol} listener in ${l.mode} mode needs a ${want}//host:port target`,
    );
    return undefined;
  }
  if (!url.port)
    problem(path, `${JSON.stringify(l.target.url)}: an explicit port is required for ${l.protocol}`);
  return { url, mtls: tlsModes };
}

/** The listener's middlewares checked; the buffer's options (in ms, without the listener's timeouts). */
function checkMiddlewares(
  l: ListenerInput,
  at: string,
  roles: Roles,
  problem: Problem,
  warnings: string[],
  positions?: number[],
): Omit<BufferOptions, "idleMs" | "connectMs"> | undefined {
  let buffer: Omit<BufferOptions, "idleMs" | "connectMs"> | undefined;
  l.middlewares.forEach((m, k) => {
    const i = positions?.[k] ?? k;
    const path = `${at}.middlewares[${i}]`;
    const protocols = MIDDLEWARE_PROTOCOLS[m.type];
    if (l.protocol === "tcp")
      problem(`${path}.type`, "tcp listeners take no middlewares (they carry bytes, not messages)");
    else if (!protocols.includes(l.protocol))
      problem(`${path}.type`, `${m.type} works on ${protocols.join(", ")} listeners, not ${l.protocol}`);
    if (m.type === "notary-query" && !roles.notary)
      problem(`${path}.type`, "notary-query needs notary.enable: true");
    if (m.type === "witness" && !roles.witness)
      problem(`${path}.type`, "witness needs the witness section (its database and the logs it follows)");
    if (m.type === "witness" && l.mode === "client")
      problem(
        `${path}.type`,
        "witness takes pushes over SPIFFE mTLS: put it on a server or central listener, not a client one",
      );
    if (m.type === "buffer") {
      if (m.storage["max-bytes"] === 0) m.storage["max-bytes"] = DEFAULT_BUFFER_MAX_BYTES;
      if (m.storage.type === "sqlite") {
        if (!m.storage.path)
          problem(`${path}.storage.path`, "storage.type sqlite needs a path (the database file)");
        else if (m.storage.path === ":memory:" || m.storage.path.startsWith("file:"))
          problem(
            `${path}.storage.path`,
            `${JSON.stringify(m.storage.path)}: expected a file path (SQLite names and URIs are not taken; for a buffer in memory use storage.type in-memory)`,
          );
        else writableParent(`${path}.storage.path`, m.storage.path, problem);
      } else if (m.storage.path)
        problem(`${path}.storage.path`, "goes with storage.type sqlite only (in-memory keeps no file)");
      const d = (field: string, text: string, fallback: string, onDefault?: () => void) =>
        durationMs(text, fallback, `${path}.${field}`, problem, onDefault);
      const maxTtlMs = d("storage.max-ttl", m.storage["max-ttl"], "0s");
      // A zero backoff selects its default (docs/proxy-configuration.md, "Validation"); the effective
      // configuration says which.
      const backoff = m["reconnect-backoff"];
      const initial = d("reconnect-backoff.initial", backoff.initial, DEFAULT_BACKOFF.initial, () => {
        backoff.initial = DEFAULT_BACKOFF.initial;
      });
      const max = d("reconnect-backoff.max", backoff.max, DEFAULT_BACKOFF.max, () => {
        backoff.max = DEFAULT_BACKOFF.max;
      });
      buffer = {
        maxBytes: m.storage["max-bytes"],
        maxMessages: m.storage["max-messages"],
        maxTtlMs,
        overflow: m["overflow-policy"],
        backoffInitialMs: initial,
        backoffMaxMs: max,
        ...(m.storage.type === "sqlite" && m.storage.path ? { path: m.storage.path } : {}),
      };
      if (max < initial) {
        problem(
          `${path}.reconnect-backoff.max`,
          `${m["reconnect-backoff"].max} is less than reconnect-backoff.initial ${m["reconnect-backoff"].initial}; max must be at least initial`,
        );
      }
    }
  });
  if (roles.notary && l.mode === "server" && l.middlewares.some((m) => m.type === "openai"))
    warnings.push(
      `${at}.middlewares: openai on a server listener notarizes nothing: notarization needs an authenticated upstream workload, so a client or central listener`,
    );
  const query = l.middlewares.findIndex((m) => m.type === "notary-query");
  const openai = l.middlewares.findIndex((m) => m.type === "openai");
  if (query >= 0 && openai >= 0 && openai < query) {
    warnings.push(
      `${at}.middlewares: openai comes before notary-query, so notary queries are refused by openai's path filter (put notary-query first)`,
    );
  }
  return buffer;
}
