/**
 * The global flags. svc prints errors as one line without a stack unless --log-stacktrace (or
 * SVC_DEBUG=true) is given.
 */
import type { ArgsDef } from "citty";
import { SvcError } from "../../lib/errors.ts";
import { ENDPOINT_ENV } from "../../lib/spiffe/address.ts";
import { LEVELS } from "../../proxy/log.ts";

const DEFAULT_SPIFFE_SOCKET = "unix:///spiffe-workload-api/agent.sock";

export const globalArgs = {
  "log-level": {
    type: "string",
    description: "Enables development logging at this level (debug, info, warn, error)",
  },
  "log-format": { type: "string", description: "Log format: text or json", default: "text" },
  "log-stacktrace": { type: "boolean", description: "Include stack traces in error logs" },
  "spiffe-socket-path": {
    type: "string",
    description: `Workload API socket [default: $SPIFFE_ENDPOINT_SOCKET, else ${DEFAULT_SPIFFE_SOCKET}]`,
  },
  verbose: {
    type: "string",
    alias: "v",
    description: "Log verbosity, higher is more verbose",
    default: "-2",
  },
} as const satisfies ArgsDef;

/** --spiffe-socket-path, then SPIFFE_ENDPOINT_SOCKET, then DEFAULT_SPIFFE_SOCKET (docs/svc-curl.md). */
export function spiffeSocket(flag: string | undefined): string {
  return flag || process.env[ENDPOINT_ENV] || DEFAULT_SPIFFE_SOCKET;
}

type Level = (typeof LEVELS)[number];

/** svc's own diagnostics on standard error, as the global flags ask for them. */
export interface CliLog {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
}

function bad(flag: string, value: string, allowed: string): SvcError {
  return new SvcError("usage", `${flag} ${JSON.stringify(value)}: ${allowed}`);
}

/**
 * Applies the global flags: --log-stacktrace (as SVC_DEBUG=true) adds stack traces to error messages;
 * --log-level, or else -v (-2 errors only, -1 warnings, 0 info, 1 and above debug), sets what svc logs on
 * standard error; --log-format writes it as text lines or JSON lines. Bad values are usage errors.
 */
export function applyGlobals(a: {
  "log-stacktrace"?: boolean;
  "log-level"?: string;
  "log-format"?: string;
  verbose?: string;
}): CliLog {
  if (a["log-stacktrace"]) process.env.SVC_DEBUG = "true";
  const format = a["log-format"] ?? "text";
  if (format !== "text" && format !== "json") throw bad("--log-format", format, "allowed are text, json");
  let level: Level | "off";
  if (a["log-level"] !== undefined) {
    const l = a["log-level"];
    if (!(LEVELS as readonly string[]).includes(l))
      throw bad("--log-level", l, `allowed are ${LEVELS.join(", ")}`);
    level = l as Level;
  } else {
    const raw = a.verbose ?? "-2";
    if (!/^-?\d+$/.test(raw)) throw bad("--verbose", raw, "expected a whole number (default -2)");
    const n = Number(raw);
    level = n >= 1 ? "debug" : n === 0 ? "info" : n === -1 ? "warn" : "off";
  }
  const rank = (l: Level | "off") => (l === "off" ? 4 : LEVELS.indexOf(l));
  const write = (l: Level, msg: string, fields: Record<string, unknown> = {}) => {
    if (rank(l) < rank(level)) return;
    const line =
      format === "json"
        ? JSON.stringify({ level: l, ts: Date.now() / 1000, msg, ...fields })
        : `svc: ${l}: ${msg}${Object.entries(fields)
            .map(([k, v]) => ` ${k}=${typeof v === "string" && !/\s/.test(v) ? v : JSON.stringify(v)}`)
            .join("")}`;
    process.stderr.write(`${line}\n`);
  };
  return { debug: (m, f) => write("debug", m, f), info: (m, f) => write("info", m, f) };
}
