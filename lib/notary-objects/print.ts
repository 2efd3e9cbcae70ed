import type { ReceiptClaims } from "./receipt.ts";
import type { StatementClaims } from "./statement.ts";

/**
 * The readable layouts of `svc curl --print-workload` / `--print-receipt` and `svc notary verify`
 * (docs/svc-curl.md): labelled fields, lists and maps indented, Raw Claims as JSON.
 */
const pad = (label: string) => `  ${`${label}:`.padEnd(24)}`;

function map(m: Record<string, string>, indent = "    "): string[] {
  const keys = Object.keys(m).sort();
  return keys.length ? keys.map((k) => `${indent}${k}: ${m[k]}`) : [`${indent}(none)`];
}

function raw(claims: object): string[] {
  return [
    "  Raw Claims:",
    ...JSON.stringify(claims, null, 2)
      .split("\n")
      .map((l) => `    ${l}`),
  ];
}

export function formatStatement(id: string, c: StatementClaims): string {
  const s = c.svc;
  return [
    `Workload Identity Statement ${id}`,
    `${pad("Trust Domain")}${s.trustDomain}`,
    `${pad("SPIFFE ID")}${s.spiffeId}`,
    `${pad("Namespace")}${s.namespace}`,
    `${pad("Service Account")}${s.serviceAccount}`,
    `${pad("Pod Name")}${s.podName}`,
    `${pad("Pod UID")}${s.podUid}`,
    "  Container Images:",
    ...(s.images.length ? s.images.map((i) => `    - ${i}`) : ["    (none)"]),
    "  Labels:",
    ...map(s.labels),
    "  Annotations:",
    ...map(s.annotations),
    `${pad("Issuer")}${c.iss}`,
    `${pad("Issued At")}${new Date(c.iat * 1000).toISOString()}`,
    ...raw(c),
    "",
  ].join("\n");
}

function body(bytes: Uint8Array | undefined, length: number, sha256: string): string[] {
  const head = `    Body (${length} bytes, sha256 ${sha256}):`;
  if (!bytes) return [head, "      (not available here)"];
  const text = new TextDecoder("utf-8", { fatal: false }).decode(bytes);
  return [head, ...text.split("\n").map((l) => `      ${l}`)];
}

export function formatReceipt(
  id: string,
  c: ReceiptClaims,
  bodies: { request?: Uint8Array; response?: Uint8Array } = {},
): string {
  const { request: q, response: r } = c.svc;
  return [
    `Receipt ${id}`,
    `${pad("Issuer")}${c.iss}`,
    "  Audience:",
    ...c.aud.map((a) => `    - ${a}`),
    `${pad("Issued At")}${new Date(c.iat * 1000).toISOString()}`,
    `${pad("Workload Statement ID")}${c.svc.workloadStatementID}`,
    `${pad("Request ID")}${c.svc.requestID}`,
    "  HTTP Request:",
    `    Method: ${q.method}`,
    `    Path: ${q.path}`,
    "    Headers:",
    ...map(q.headers, "      "),
    ...body(bodies.request, q.body.length, q.body.sha256),
    ...(q.forwardedBody
      ? [`    Forwarded body (${q.forwardedBody.length} bytes, sha256 ${q.forwardedBody.sha256})`]
      : []),
    "  HTTP Response:",
    `    Status: ${r.status}`,
    "    Headers:",
    ...map(r.headers, "      "),
    ...body(bodies.response, r.body.length, r.body.sha256),
    ...(r.upstreamBody
      ? [`    Upstream body (${r.upstreamBody.length} bytes, sha256 ${r.upstreamBody.sha256})`]
      : []),
    ...raw(c),
    "",
  ].join("\n");
}
