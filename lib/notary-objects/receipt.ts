/**
 * The request receipt (docs/notary.md, "Formats"): a proxy's signed account of one exchange — what was asked
 * and what was answered, bodies as length and SHA-256 — tied to the workload statement of the upstream.
 */
import * as v from "valibot";
import { SvcError } from "../errors.ts";
import type { BundleSource } from "../spiffe/bundle.ts";
import { checkStreamedBody, type StreamRecord } from "./chat-stream.ts";
import { type BodyDigest, bodyDigest, contentId } from "./ids.ts";
import { type SvidSigner, signJws, type VerifiedJws, verifyJws } from "./jws.ts";
import { NOTARY_HEADERS } from "./levels.ts";
import type { SignedObject } from "./statement.ts";

const RECEIPT_TYP = "svc-receipt+jws";
/**
 * The largest response a receipt covers: the openai middleware buffers and notarizes none larger, and svc
 * curl reads none larger to check one.
 */
export const MAX_NOTARIZED_RESPONSE = 64 * 1024 * 1024;
const RECEIPT_AUDIENCE_SUFFIX = "/receipt";

/**
 * `body` is always what the caller sent and received, so that a caller can check it. When a middleware
 * changed a body on its way (the openai filter removes fields outside its model), the receipt also binds
 * what passed the other hop: `forwardedBody`, the request as the upstream got it, and `upstreamBody`, the
 * response as the upstream sent it.
 */
export interface ReceiptExchange {
  request: {
    method: string;
    path: string;
    headers: Record<string, string>;
    body: BodyDigest;
    forwardedBody?: BodyDigest;
  };
  response: {
    status: number;
    headers: Record<string, string>;
    body: BodyDigest;
    upstreamBody?: BodyDigest;
    /** A streamed answer (server-sent events): how it went and what its chunks assembled to. */
    stream?: StreamRecord;
  };
}

const text = v.string();
const digest = v.object({ length: v.number(), sha256: text });
/** What a verifier reads of a receipt's claims, so that printing and checks never meet another shape. */
const RECEIPT_CLAIMS = v.object({
  iss: text,
  aud: v.array(text),
  iat: v.number(),
  svc: v.object({
    workloadStatementID: text,
    requestID: text,
    request: v.object({
      method: text,
      path: text,
      headers: v.record(text, text),
      body: digest,
      forwardedBody: v.optional(digest),
    }),
    response: v.object({
      status: v.number(),
      headers: v.record(text, text),
      body: digest,
      upstreamBody: v.optional(digest),
      stream: v.optional(v.object({ id: text, chunks: v.number(), end: text, message: digest })),
    }),
  }),
});

export interface ReceiptClaims {
  iss: string;
  aud: string[];
  iat: number;
  svc: { workloadStatementID: string; requestID: string } & ReceiptExchange;
}

/**
 * Headers that never enter a receipt: credentials (a receipt is served to whoever may query the notary)
 * and the headers the notary itself adds to the response.
 */
const EXCLUDED = new Set([
  "authorization",
  "proxy-authorization",
  "cookie",
  "set-cookie",
  // API keys as OpenAI-compatible servers take them (Azure OpenAI's api-key; x-api-key).
  "api-key",
  "x-api-key",
  ...NOTARY_HEADERS,
]);

/** Lower-cased, excluded names dropped, repeated values joined with ", ", sorted by name. */
export function receiptHeaders(
  headers: Record<string, string | string[] | number | undefined>,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    const key = name.toLowerCase();
    if (EXCLUDED.has(key) || value === undefined) continue;
    out[key] = Array.isArray(value) ? value.join(", ") : String(value);
  }
  return Object.fromEntries(Object.entries(out).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

export async function signReceipt(
  issuer: string,
  origin: string,
  statementId: string,
  requestId: string,
  exchange: ReceiptExchange,
  signer: SvidSigner,
  now = new Date(),
): Promise<SignedObject & { claims: ReceiptClaims }> {
  const claims: ReceiptClaims = {
    iss: issuer,
    aud: [`${origin}${RECEIPT_AUDIENCE_SUFFIX}`],
    iat: Math.floor(now.getTime() / 1000),
    svc: { workloadStatementID: statementId, requestID: requestId, ...exchange },
  };
  const jws = await signJws(claims, signer, RECEIPT_TYP);
  return { id: contentId(jws), jws, claims };
}

export interface ReceiptCheck {
  expectedId?: string;
  /** The SPIFFE ID that must have signed it: the notary that issued the statement it names. */
  issuer?: string;
  /** The X-Request-Id the caller sent, which the receipt must record (a receipt of another exchange fails). */
  requestId?: string;
  /** The statement the receipt must name. */
  statementId?: string;
  /** What the caller sent and received; each given part must match the receipt. */
  request?: { method?: string; path?: string; body?: Uint8Array | string };
  response?: { status?: number; body?: Uint8Array | string };
}

/** Verifies a receipt and, for each part of `check` given, that it describes that exchange. Throws SvcError("receipt"). */
export async function verifyReceipt(
  jws: string,
  bundles: BundleSource,
  check: ReceiptCheck = {},
): Promise<VerifiedJws<ReceiptClaims> & { id: string }> {
  const what = "receipt";
  const id = contentId(jws.trim());
  const verified = await verifyJws<ReceiptClaims>(jws.trim(), bundles, {
    typ: RECEIPT_TYP,
    audienceSuffix: RECEIPT_AUDIENCE_SUFFIX,
    what,
    code: "receipt",
    schema: RECEIPT_CLAIMS,
  });
  const bad = (why: string) => new SvcError("receipt", `${what} verification failed: ${why}`);
  const s = verified.claims.svc;
  if (check.expectedId !== undefined && check.expectedId !== id)
    throw bad(`its ID is ${id}, not ${check.expectedId}`);
  if (check.statementId !== undefined && s.workloadStatementID !== check.statementId)
    throw bad(`it names workload statement ${s.workloadStatementID}, not ${check.statementId}`);
  if (check.issuer !== undefined && verified.issuer.uri !== check.issuer)
    throw bad(`it is signed by ${verified.issuer.uri}, but the workload statement by ${check.issuer}`);
  if (check.requestId !== undefined && s.requestID !== check.requestId)
    throw bad(
      `it records request ID ${JSON.stringify(s.requestID)}, the request was sent as ${JSON.stringify(check.requestId)} (a receipt of another exchange)`,
    );
  const r = check.request;
  if (r?.method !== undefined && r.method.toUpperCase() !== s.request.method)
    throw bad(`it records method ${s.request.method}, the request was ${r.method.toUpperCase()}`);
  if (r?.path !== undefined && r.path !== s.request.path)
    throw bad(`it records path ${s.request.path}, the request was ${r.path}`);
  const digest = (side: "request" | "response", body: Uint8Array | string | undefined) => {
    if (body === undefined) return;
    const d = bodyDigest(body);
    const rec = s[side].body;
    if (d.length !== rec.length || d.sha256 !== rec.sha256)
      throw bad(
        `the ${side} body does not match: ${side === "request" ? "sent" : "received"} ${d.length} bytes sha256 ${d.sha256}, the receipt records ${rec.length} bytes sha256 ${rec.sha256}`,
      );
  };
  digest("request", r?.body);
  if (check.response?.status !== undefined && check.response.status !== s.response.status)
    throw bad(`it records status ${s.response.status}, the response was ${check.response.status}`);
  digest("response", check.response?.body);
  // A streamed answer: its events, as received, must assemble to the message the receipt records.
  if (s.response.stream && check.response?.body !== undefined) {
    const b = check.response.body;
    checkStreamedBody(typeof b === "string" ? new TextEncoder().encode(b) : b, s.response.stream);
  }
  return { ...verified, id };
}
