import type { ArgsDef } from "citty";

/**
 * The global flags of specification 4.5. svc prints errors as one line without a stack unless
 * --log-stacktrace (or SVC_DEBUG=true) is given.
 */
export const DEFAULT_SPIFFE_SOCKET = "unix:///spiffe-workload-api/agent.sock";

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

/** --spiffe-socket-path, then SPIFFE_ENDPOINT_SOCKET, then the specification's default. */
export function spiffeSocket(flag: string | undefined): string {
  return flag || process.env.SPIFFE_ENDPOINT_SOCKET || DEFAULT_SPIFFE_SOCKET;
}

export function applyGlobals(a: { "log-stacktrace"?: boolean }): void {
  if (a["log-stacktrace"]) process.env.SVC_DEBUG = "true";
}
