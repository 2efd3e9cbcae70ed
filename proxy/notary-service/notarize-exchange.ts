/**
 * Notarizes one buffered HTTP exchange at `level` and returns the response headers that carry the result
 * (docs/notary.md, "Levels"): Svc-Workload-ID always, Svc-Workload-Statement unless it is over
 * STATEMENT_HEADER_LIMIT (callers then fetch it by its ID), Svc-Receipt-ID and Svc-Receipt for signRequest.
 * The receipt records the request headers as forwarded to the target and the response headers as passed
 * on to the caller. Throws SvcError("pod_mismatch" | "kube_api" | "notary") when no statement can be made.
 */
import type { StreamRecord } from "../../lib/notary-objects/chat-stream.ts";
import { type BodyDigest, bodyDigest } from "../../lib/notary-objects/ids.ts";
import type { Level } from "../../lib/notary-objects/levels.ts";
import { receiptHeaders } from "../../lib/notary-objects/receipt.ts";
import { endToEnd, requestFields } from "../http/headers.ts";
import type { ProxyRequest, Upstream } from "../http/types.ts";
import type { Notary } from "./notary.ts";

const STATEMENT_HEADER_LIMIT = 8 * 1024;

export interface BufferedExchange {
  req: ProxyRequest;
  /** The request body as the caller sent it. */
  requestBody: Uint8Array;
  /** The request body as forwarded, when a middleware changed it. */
  forwardedBody?: Uint8Array;
  status: number;
  responseHeaders: Record<string, string | string[] | number | undefined>;
  /** The response body as the caller receives it. */
  responseBody: Uint8Array;
  /** The response body as the upstream sent it (or its digest), when a middleware changed it. */
  upstreamBody?: Uint8Array | BodyDigest;
  /** A streamed answer's record (openai-stream.ts). */
  stream?: StreamRecord;
}

export async function notarizeExchange(
  notary: Notary,
  level: Level,
  origin: string,
  upstream: Upstream,
  x: BufferedExchange,
): Promise<Record<string, string>> {
  const statement = await statementHeaders(notary, upstream, origin);
  return { ...statement.headers, ...(await recordExchange(notary, level, origin, statement.id, x)) };
}

/**
 * The statement about `upstream` and the headers that carry it: what a streamed answer sends before its
 * first event.
 */
export async function statementHeaders(
  notary: Notary,
  upstream: Upstream,
  origin: string,
): Promise<{ id: string; headers: Record<string, string> }> {
  const statement = await notary.statementFor(upstream, origin);
  const headers: Record<string, string> = { "svc-workload-id": statement.id };
  // A pod's annotations can make a statement larger than HTTP clients read as one header (16 KiB).
  if (statement.jws.length <= STATEMENT_HEADER_LIMIT) headers["svc-workload-statement"] = statement.jws;
  return { id: statement.id, headers };
}

/** Records the exchange at `level`; returns the receipt's headers at signRequest. */
export async function recordExchange(
  notary: Notary,
  level: Level,
  origin: string,
  statementId: string,
  x: BufferedExchange,
): Promise<Record<string, string>> {
  const receipt = await notary.record(
    level,
    statementId,
    origin,
    x.req.id,
    {
      request: {
        method: x.req.method,
        path: x.req.path,
        headers: receiptHeaders(requestFields(x.req)),
        body: bodyDigest(x.requestBody),
        ...(x.forwardedBody ? { forwardedBody: bodyDigest(x.forwardedBody) } : {}),
      },
      response: {
        status: x.status,
        headers: receiptHeaders(endToEnd(x.responseHeaders, false)),
        body: bodyDigest(x.responseBody),
        ...(x.upstreamBody
          ? {
              upstreamBody:
                x.upstreamBody instanceof Uint8Array ? bodyDigest(x.upstreamBody) : x.upstreamBody,
            }
          : {}),
        ...(x.stream ? { stream: x.stream } : {}),
      },
    },
    // logRequest keeps the bodies as the caller sent and received them, as `body` records them.
    { request: x.requestBody, response: x.responseBody },
  );
  return receipt ? { "svc-receipt-id": receipt.id, "svc-receipt": receipt.jws } : {};
}
