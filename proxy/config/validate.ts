import { accessSync, constants, existsSync } from "node:fs";
import { dirname, resolve } from "node:path";
import * as v from "valibot";
import { parseDuration } from "../../lib/duration.ts";
import { SvcError } from "../../lib/errors.ts";
import { parseEndpoint } from "../../lib/spiffe/address.ts";
import { compilePatterns } from "../../lib/spiffe/authorizer.ts";
import {
  Config,
  type ConfigInput,
  DEFAULT_BUFFER_MAX_BYTES,
  DEFAULT_METRICS_ADDR,
  DEFAULT_TIMEOUTS,
  Listener,
  type ListenerInput,
  Middleware,
  type MiddlewareInput,
} from "./schema.ts";
import { unknownFields } from "./unknown-fields.ts";

/**
 * Validates a parsed configuration document: every error at once, each naming its field path, the bad
 * value and what is allowed. Returns the effective configuration (defaults filled, zero durations replaced
 * by their defaults) and warnings (unknown fields, settings that have no effect).
 */
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
  /** True when the hop to the target is SPIFFE mTLS (client and central modes with https/tls/mqtts). */
  targetMtls: boolean;
  sourceIds: string[];
  targetIds: string[];
  timeouts: { readMs: number; writeMs: number; idleMs: number; handshakeMs: number };
  disableKeepalive: boolean;
  middlewares: MiddlewareInput[];
}

export interface AdmissionConfig {
  address: HostPort;
  certFile: string;
  keyFile: string;
  unlabeledPods: "deny" | "allow";
  kubeconfig: string | undefined;
}

export interface ProxyConfig {
  /** Empty when the proxy needs no SPIFFE identity (it serves only the admission webhook). */
  workloadApi: string;
  admission: AdmissionConfig | undefined;
  metricsAddr: HostPort | undefined;
  keylog: string | undefined;
  notary: { enable: boolean; database: NotaryDatabase | undefined };
  listeners: ListenerConfig[];
  /** The document with defaults filled in, as `-check` prints it. */
  effective: ConfigInput;
}

export class ConfigError extends SvcError {
  constructor(readonly problems: string[]) {
    super(
      "usage",
      `invalid configuration (${problems.length} problem${problems.length === 1 ? "" : "s"}):\n${problems.map((p) => `  ${p}`).join("\n")}`,
    );
  }
}

const TARGET_SCHEMES: Record<ListenerInput["protocol"], { mtls: string; plain: string }> = {
  http: { mtls: "https:", plain: "http:" },
  tcp: { mtls: "tls:", plain: "tcp:" },
  mqtt: { mtls: "mqtts:", plain: "mqtt:" },
};

const MIDDLEWARE_PROTOCOLS: Record<MiddlewareInput["type"], ListenerInput["protocol"][]> = {
  "notary-query": ["http"],
  openai: ["http"],
  dummy: ["http"],
  buffer: ["mqtt"],
};

function pathOf(issue: v.BaseIssue<unknown>): string {
  return (issue.path ?? [])
    .map((p) => (typeof p.key === "number" ? `[${p.key}]` : `.${String(p.key)}`))
    .join("")
    .replace(/^\./, "");
}

export function parseHostPort(text: string): HostPort | undefined {
  const m = /^(\[[0-9a-fA-F:.]+\]|[^:[\]\s]*):(\d{1,5})$/.exec(text);
  if (!m) return undefined;
  const port = Number(m[2]);
  if (port > 65535) return undefined;
  return { host: (m[1] as string).replace(/^\[|\]$/g, ""), port };
}

/** The sections (and listeners, with their indexes) that have the right shape. */
interface Parts {
  spiffe?: ConfigInput["spiffe"];
  metricsAddr?: string;
  keylog?: string;
  notary?: ConfigInput["notary"];
  admission?: ConfigInput["admission"];
  /** Index in the document, the listener, and where its middlewares stood when some were left out. */
  listeners: [number, ListenerInput, number[]?][];
}

// When the whole document does not parse, each section and each listener is parsed on its own, so that
// the rules relating fields still run wherever they can: every problem is reported at once.
function wellFormedParts(raw: unknown): Parts {
  const doc = (typeof raw === "object" && raw !== null ? raw : {}) as Record<string, unknown>;
  const parts: Parts = { listeners: [] };
  const section = <T>(schema: v.GenericSchema<unknown, T>, value: unknown): T | undefined => {
    const r = v.safeParse(schema, value);
    return r.success ? r.output : undefined;
  };
  parts.spiffe = section(Config.entries.spiffe, doc.spiffe);
  parts.metricsAddr = section(Config.entries.metricsAddr, doc.metricsAddr);
  parts.keylog = section(Config.entries.keylog, doc.keylog);
  parts.notary = section(Config.entries.notary, doc.notary);
  parts.admission = section(Config.entries.admission, doc.admission);
  if (Array.isArray(doc.listeners)) {
    doc.listeners.forEach((item, i) => {
      const whole = section(Listener, item);
      if (whole) {
        parts.listeners.push([i, whole]);
        return;
      }
      const l = section(Listener, repaired(item));
      const listed = (item as { middlewares?: unknown } | null)?.middlewares;
      const positions = Array.isArray(listed)
        ? listed.flatMap((m, k) => (v.safeParse(Middleware, m).success ? [k] : []))
        : undefined;
      if (l) parts.listeners.push([i, l, positions]);
    });
  }
  return parts;
}

// The fields a listener's rules cannot be checked without: when one of them is malformed, the listener's
// rules are not run (its schema problem is reported).
const ESSENTIAL = new Set(["name", "address", "mode", "protocol"]);

/**
 * A listener whose malformed optional fields are left out (so their defaults apply) and whose malformed
 * middlewares and SPIFFE ID lists are dropped, so that the rules relating its other fields still run. The
 * schema has reported what was left out; this only keeps it from hiding the rest.
 */
function repaired(item: unknown): unknown {
  if (typeof item !== "object" || item === null || Array.isArray(item)) return item;
  const out: Record<string, unknown> = { ...item };
  const ok = (schema: v.GenericSchema, value: unknown) => v.safeParse(schema, value).success;
  for (const [key, entry] of Object.entries(Listener.entries)) {
    const value = out[key];
    if (ESSENTIAL.has(key) || ok(entry, value)) continue;
    if (key === "middlewares" && Array.isArray(value)) out[key] = value.filter((m) => ok(Middleware, m));
    else if (typeof value === "object" && value !== null && !Array.isArray(value)) {
      // timeouts, source, target, connection: keep the sub-fields that are well formed.
      const inner = { ...(value as Record<string, unknown>) };
      const schema = (entry as { wrapped?: v.ObjectSchema<v.ObjectEntries, undefined> }).wrapped ?? entry;
      const entries = (schema as v.ObjectSchema<v.ObjectEntries, undefined>).entries ?? {};
      for (const [sub, subSchema] of Object.entries(entries)) {
        if (!ok(subSchema as v.GenericSchema, inner[sub])) delete inner[sub];
      }
      out[key] = inner;
    } else if (key !== "target") delete out[key];
  }
  return out;
}

export function validateConfig(raw: unknown): { config: ProxyConfig; warnings: string[] } {
  const parsed = v.safeParse(Config, raw, { abortEarly: false });
  // A missing key is reported by its parent object with a generic message; say what it is.
  const issueText = (i: v.BaseIssue<unknown>) =>
    `${pathOf(i) || "(document)"}: ${i.message.startsWith("Invalid key:") ? "required field is missing" : i.message}`;
  const problems: string[] = parsed.success ? [] : parsed.issues.map(issueText);
  const warnings = unknownFields(Config, raw).map((p) => `${p}: unknown field, ignored (check its spelling)`);
  const problem = (path: string, message: string) => problems.push(`${path}: ${message}`);
  const parts: Parts = parsed.success
    ? { ...parsed.output, listeners: parsed.output.listeners.map((l, i): [number, ListenerInput] => [i, l]) }
    : wellFormedParts(raw);

  let workloadApi = "";
  if (parts.spiffe) {
    try {
      workloadApi = parseEndpoint(parts.spiffe.workload_socket_path);
    } catch (e) {
      problem("spiffe.workload_socket_path", (e as Error).message);
    }
  }

  let metricsAddr: HostPort | undefined;
  if (parts.metricsAddr !== undefined) {
    if (parts.metricsAddr === "") parts.metricsAddr = DEFAULT_METRICS_ADDR;
    metricsAddr = parts.metricsAddr === "0" ? undefined : parseHostPort(parts.metricsAddr);
    if (parts.metricsAddr !== "0" && !metricsAddr) {
      problem(
        "metricsAddr",
        `invalid address ${JSON.stringify(parts.metricsAddr)} (allowed: host:port, :port, or "0" to disable)`,
      );
    }
  }

  if (parts.keylog) writableParent("keylog", parts.keylog, problem);
  const notaryEnabled = parts.notary?.enable ?? false;
  const database = parts.notary ? notaryDatabase(parts.notary.database, notaryEnabled, problem) : undefined;

  const doc = (typeof raw === "object" && raw !== null ? raw : {}) as Record<string, unknown>;
  const listed = Array.isArray(doc.listeners) ? doc.listeners.length : 0;
  const noListeners = doc.listeners === undefined || (Array.isArray(doc.listeners) && listed === 0);
  if (noListeners && doc.admission === undefined)
    problem("listeners", "at least one listener is required (or an admission block)");
  if (doc.spiffe === undefined && (listed > 0 || notaryEnabled))
    problem("spiffe", "required field is missing (listeners and the notary need a SPIFFE identity)");
  const admission = parts.admission ? admissionConfig(parts.admission, problem) : undefined;
  // An admission block with other problems still has its address checked: every problem at once.
  const rawAdmission = doc.admission as { address?: unknown } | undefined;
  if (!parts.admission && typeof rawAdmission?.address === "string" && !parseHostPort(rawAdmission.address))
    problem("admission.address", badAddress(rawAdmission.address));
  if (parts.keylog && listed === 0)
    warnings.push("keylog: has no effect without listeners (the admission webhook's TLS is not logged)");

  const seen = new Map<string, number>();
  const listeners = parts.listeners.map(([i, l, positions]) => {
    const at = `listeners[${i}]`;
    const first = seen.get(l.name);
    if (first !== undefined) {
      problem(
        `${at}.name`,
        `duplicate name ${JSON.stringify(l.name)} (also listeners[${first}].name); names must be unique`,
      );
    } else seen.set(l.name, i);
    const address = parseHostPort(l.address);
    if (!address) problem(`${at}.address`, badAddress(l.address));
    const target = checkTarget(l, at, problem, warnings);
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
    if (l.mode === "client" && l.source.spiffe_ids.length > 0) {
      warnings.push(
        `${at}.source.spiffe_ids: has no effect in client mode, where callers connect in plaintext (bind the listener to loopback)`,
      );
    }
    if (l.mode !== "server" && target && !target.mtls && l.target.spiffe_ids.length > 0) {
      warnings.push(
        `${at}.target.spiffe_ids: has no effect: the target ${l.target.url} is not spoken to over SPIFFE mTLS (use https://, tls:// or mqtts:// for that)`,
      );
    }
    if (l.mode === "server" && l.target.spiffe_ids.length > 0) {
      warnings.push(
        `${at}.target.spiffe_ids: has no effect in server mode, whose target hop is not SPIFFE mTLS`,
      );
    }
    const timeouts = {
      readMs: timeout(l.timeouts, "read", `${at}.timeouts.read`, problem),
      writeMs: timeout(l.timeouts, "write", `${at}.timeouts.write`, problem),
      idleMs: timeout(l.timeouts, "idle", `${at}.timeouts.idle`, problem),
      handshakeMs: timeout(l.timeouts, "handshake", `${at}.timeouts.handshake`, problem),
    };
    checkMiddlewares(l, at, notaryEnabled, problem, warnings, positions);
    return {
      name: l.name,
      address: address ?? { host: "", port: 0 },
      mode: l.mode,
      protocol: l.protocol,
      target: target?.url ?? new URL("invalid:"),
      targetMtls: target?.mtls ?? false,
      sourceIds: l.source.spiffe_ids,
      targetIds: l.target.spiffe_ids,
      timeouts,
      disableKeepalive: l.connection.disable_keepalive,
      middlewares: l.middlewares,
    } satisfies ListenerConfig;
  });

  if (!parsed.success || problems.length > 0) throw new ConfigError(problems);
  return {
    config: {
      workloadApi,
      admission,
      metricsAddr,
      keylog: parts.keylog || undefined,
      notary: { enable: notaryEnabled, database },
      listeners,
      // The effective configuration shows the address in force: an empty metricsAddr means the default.
      effective: { ...parsed.output, metricsAddr: parts.metricsAddr ?? parsed.output.metricsAddr },
    },
    warnings,
  };
}

const badAddress = (address: string) =>
  `invalid address ${JSON.stringify(address)} (allowed: host:port, or :port for all interfaces)`;

function admissionConfig(
  a: NonNullable<ConfigInput["admission"]>,
  problem: (p: string, m: string) => void,
): AdmissionConfig {
  const address = parseHostPort(a.address);
  if (!address) problem("admission.address", badAddress(a.address));
  for (const [field, path] of [
    ["admission.cert_file", a.cert_file],
    ["admission.key_file", a.key_file],
    ...(a.kubeconfig ? [["admission.kubeconfig", a.kubeconfig]] : []),
  ] as const) {
    try {
      accessSync(path, constants.R_OK);
    } catch (e) {
      problem(field, `cannot read ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
  }
  return {
    address: address ?? { host: "", port: 0 },
    certFile: a.cert_file,
    keyFile: a.key_file,
    unlabeledPods: a.unlabeled_pods,
    kubeconfig: a.kubeconfig || undefined,
  };
}

/** Where the notary keeps its records: an SQLite file (one replica) or PostgreSQL (any number). */
export type NotaryDatabase =
  | { kind: "sqlite"; path: string }
  | { kind: "postgres"; url: string; passwordFile: string | undefined; poolSize: number };

function notaryDatabase(
  d: NonNullable<ConfigInput["notary"]>["database"],
  enabled: boolean,
  problem: (p: string, m: string) => void,
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
    if (d.password_file && !existsSync(d.password_file))
      problem("notary.database.password_file", `${JSON.stringify(d.password_file)} does not exist`);
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

function writableParent(field: string, path: string, problem: (p: string, m: string) => void): void {
  const dir = dirname(resolve(path));
  if (!existsSync(dir)) {
    problem(
      field,
      `directory ${dir} of ${JSON.stringify(path)} does not exist (it must exist and be writable)`,
    );
    return;
  }
  try {
    accessSync(dir, constants.W_OK);
  } catch {
    problem(field, `directory ${dir} of ${JSON.stringify(path)} is not writable`);
  }
}

// A Go duration in milliseconds: negative is an error; zero selects `fallback` (specification 8: zero
// never disables a timeout), and `onDefault` is told so that the effective document can show it.
function durationMs(
  text: string,
  fallback: string,
  path: string,
  problem: (p: string, m: string) => void,
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
  problem: (p: string, m: string) => void,
): number {
  return durationMs(t[key], DEFAULT_TIMEOUTS[key], path, problem, () => {
    t[key] = DEFAULT_TIMEOUTS[key];
  });
}

function checkTarget(
  l: ListenerInput,
  at: string,
  problem: (p: string, m: string) => void,
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

function checkMiddlewares(
  l: ListenerInput,
  at: string,
  notaryEnabled: boolean,
  problem: (p: string, m: string) => void,
  warnings: string[],
  positions?: number[],
): void {
  l.middlewares.forEach((m, k) => {
    const i = positions?.[k] ?? k;
    const path = `${at}.middlewares[${i}]`;
    const protocols = MIDDLEWARE_PROTOCOLS[m.type];
    if (l.protocol === "tcp")
      problem(`${path}.type`, "tcp listeners take no middlewares (they carry bytes, not messages)");
    else if (!protocols.includes(l.protocol))
      problem(`${path}.type`, `${m.type} works on ${protocols.join(", ")} listeners, not ${l.protocol}`);
    if (m.type === "notary-query" && !notaryEnabled)
      problem(`${path}.type`, "notary-query needs notary.enable: true");
    if (m.type === "buffer") {
      if (m.storage["max-bytes"] === 0) m.storage["max-bytes"] = DEFAULT_BUFFER_MAX_BYTES;
      const d = (field: string, text: string, fallback: string, onDefault?: () => void) =>
        durationMs(text, fallback, `${path}.${field}`, problem, onDefault);
      d("storage.max-ttl", m.storage["max-ttl"], "0s");
      // A zero backoff selects its default (section 8); the effective configuration says which.
      const backoff = m["reconnect-backoff"];
      const initial = d("reconnect-backoff.initial", backoff.initial, "1s", () => {
        backoff.initial = "1s";
      });
      const max = d("reconnect-backoff.max", backoff.max, "30s", () => {
        backoff.max = "30s";
      });
      if (max < initial) {
        problem(
          `${path}.reconnect-backoff.max`,
          `${m["reconnect-backoff"].max} is less than reconnect-backoff.initial ${m["reconnect-backoff"].initial}; max must be at least initial`,
        );
      }
    }
  });
  if (notaryEnabled && l.mode === "server" && l.middlewares.some((m) => m.type === "openai"))
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
}
