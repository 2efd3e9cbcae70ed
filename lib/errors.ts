/**
 * Typed errors. Every error a user can see carries a code; the entry points map codes to exit
 * statuses (and the proxy to HTTP statuses) in one place, and print `message` without a stack.
 */
export type ErrorCode =
  | "invalid_spiffe_id"
  | "invalid_svid"
  | "untrusted_peer"
  | "unauthorized_peer"
  | "invalid_pattern"
  | "invalid_address"
  | "workload_api"
  | "invalid_jwt"
  | "notary"
  /** The notary cannot store or vouch now (its database is unreachable, its log failed its check): 503. */
  | "notary_unavailable"
  | "pod_mismatch"
  | "kube_api"
  | "network"
  | "statement"
  | "receipt"
  | "http_status"
  | "compartment"
  | "usage";

export class SvcError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
  ) {
    super(message);
    this.name = "SvcError";
  }
}

export function isSvcError(e: unknown, code?: ErrorCode): e is SvcError {
  return e instanceof SvcError && (code === undefined || e.code === code);
}

/** The codes of a peer that failed the SPIFFE checks: refused, as opposed to unreachable or failed. */
const PEER_REFUSALS: ReadonlySet<ErrorCode> = new Set([
  "unauthorized_peer",
  "untrusted_peer",
  "invalid_svid",
]);

/** Whether `e` says a peer was refused by the SPIFFE checks (counted as denied, not as a failure). */
export const isPeerRefusal = (e: unknown): e is SvcError => isSvcError(e) && PEER_REFUSALS.has(e.code);
