/**
 * The readable layouts of `svc curl --print-workload` / `--print-receipt` and `svc notary verify`
 * (docs/svc-curl.md): labelled fields, lists and maps indented, Raw Claims as JSON.
 */
import type { ReceiptClaims } from "./receipt.ts";
import type { StatementClaims } from "./statement.ts";

const pad = (label: string) => `  ${`${label}:`.padEnd(24)}`;

/**
 * A value from a signed object, safe on a terminal: control characters (a newline could fake a line, an
 * escape sequence hide the rest) and bidirectional overrides are shown as \u escapes.
 */
const safe = (value: unknown): string =>
  String(value).replace(
    /[\p{Cc}\u2028\u2029\u202a-\u202e\u2066-\u2069]/gu,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );

function map(m: Record<string, string>, indent = "    "): string[] {
  const keys = Object.keys(m).sort();
  return keys.length ? keys.map((k) => `${indent}${safe(k)}: ${safe(m[k])}`) : [`${indent}(none)`];
}

function raw(claims: object): string[] {
  return [
    "  Raw Claims:",
    ...JSON.stringify(claims, null, 2)
      .split("\n")
      .map((l) => `    ${safe(l)}`),
  ];
}

export function formatStatement(id: string, c: StatementClaims): string {
  const s = c.svc;
  return [
    `Workload Identity Statement ${id}`,
    `${pad("Trust Domain")}${safe(s.trustDomain)}`,
    `${pad("SPIFFE ID")}${safe(s.spiffeId)}`,
    `${pad("Namespace")}${safe(s.namespace)}`,
    `${pad("Service Account")}${safe(s.serviceAccount)}`,
    `${pad("Pod Name")}${safe(s.podName)}`,
    `${pad("Pod UID")}${safe(s.podUid)}`,
    "  Container Images:",
    ...(s.images.length ? s.images.map((i) => `    - ${safe(i)}`) : ["    (none)"]),
    "  Labels:",
    ...map(s.labels),
    "  Annotations:",
    ...map(s.annotations),
    `${pad("Issuer")}${safe(c.iss)}`,
    `${pad("Issued At")}${new Date(c.iat * 1000).toISOString()}`,
    ...raw(c),
    "",
  ].join("\n");
}

function body(bytes: Uint8Array | undefined, length: number, sha256: string): string[] {
  const head = `    Body (${length} bytes, sha256 ${safe(sha256)}):`;
  if (!bytes) return [head, "      (not available here)"];
  const text = new TextDecoder("utf-8", { fatal: false }).decode(bytes);
  return [head, ...text.split("\n").map((l) => `      ${safe(l)}`)];
}

export function formatReceipt(
  id: string,
  c: ReceiptClaims,
  bodies: { request?: Uint8Array; response?: Uint8Array } = {},
): string {
  const { request: q, response: r } = c.svc;
  return [
    `Receipt ${id}`,
    `${pad("Issuer")}${safe(c.iss)}`,
    "  Audience:",
    ...c.aud.map((a) => `    - ${safe(a)}`),
    `${pad("Issued At")}${new Date(c.iat * 1000).toISOString()}`,
    `${pad("Workload Statement ID")}${safe(c.svc.workloadStatementID)}`,
    `${pad("Request ID")}${safe(c.svc.requestID)}`,
    "  HTTP Request:",
    `    Method: ${safe(q.method)}`,
    `    Path: ${safe(q.path)}`,
    "    Headers:",
    ...map(q.headers, "      "),
    ...body(bodies.request, q.body.length, q.body.sha256),
    ...(q.forwardedBody
      ? [`    Forwarded body (${q.forwardedBody.length} bytes, sha256 ${safe(q.forwardedBody.sha256)})`]
      : []),
    "  HTTP Response:",
    `    Status: ${r.status}`,
    "    Headers:",
    ...map(r.headers, "      "),
    ...body(bodies.response, r.body.length, r.body.sha256),
    ...(r.upstreamBody
      ? [`    Upstream body (${r.upstreamBody.length} bytes, sha256 ${safe(r.upstreamBody.sha256)})`]
      : []),
    ...(r.stream
      ? [
          "    Stream:",
          `      ID: ${safe(r.stream.id)}`,
          `      Chunks: ${r.stream.chunks}`,
          `      End: ${safe(r.stream.end)}`,
          `      Assembled message: ${r.stream.message.length} bytes, sha256 ${safe(r.stream.message.sha256)}`,
        ]
      : []),
    ...raw(c),
    "",
  ].join("\n");
}
