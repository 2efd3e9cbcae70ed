/**
 * Notarization levels (docs/notary.md, "Levels"), chosen per request with the Svc-Notarization-Level
 * request header: shared by the proxy's notary and `svc curl`.
 */
export const LEVELS = ["workload", "logRequest", "signRequest"] as const;
export type Level = (typeof LEVELS)[number];
export const LEVEL_HEADER = "svc-notarization-level";
/** The response header that names a streamed answer's receipt before the stream starts. */
export const STREAM_HEADER = "svc-stream-id";

/** The response headers that carry a notary's statement and receipt: only the notary writes them. */
export const NOTARY_HEADERS: ReadonlySet<string> = new Set([
  "svc-workload-id",
  "svc-workload-statement",
  "svc-receipt-id",
  "svc-receipt",
  STREAM_HEADER,
]);

export function isLevel(value: string): value is Level {
  return (LEVELS as readonly string[]).includes(value);
}
