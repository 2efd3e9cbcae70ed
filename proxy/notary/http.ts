import type { Level } from "../../lib/notary/levels.ts";
import { bodyDigest, receiptHeaders } from "../../lib/notary/receipt.ts";
import type { ProxyRequest, Upstream } from "../http/types.ts";
import type { Notary } from "./notary.ts";

/**
 * Notarizes one buffered HTTP exchange at `level` and returns the response headers that carry the
 * result (DESIGN.md 4): Svc-Workload-ID and Svc-Workload-Statement always, Svc-Receipt-ID and Svc-Receipt
 * for signRequest. Throws SvcError("pod_mismatch" | "kube_api" | "notary") when no statement can be made.
 */
export interface BufferedExchange {
  req: ProxyRequest;
  requestBody: Uint8Array;
  status: number;
  responseHeaders: Record<string, string | string[] | number | undefined>;
  responseBody: Uint8Array;
}

export async function notarizeExchange(
  notary: Notary,
  level: Level,
  origin: string,
  upstream: Upstream,
  x: BufferedExchange,
): Promise<Record<string, string>> {
  const statement = await notary.statementFor(upstream, origin);
  const headers: Record<string, string> = {
    "svc-workload-id": statement.id,
    "svc-workload-statement": statement.jws,
  };
  const receipt = await notary.record(
    level,
    statement.id,
    origin,
    x.req.id,
    {
      request: {
        method: x.req.method,
        path: x.req.path,
        headers: receiptHeaders(x.req.headers),
        body: bodyDigest(x.requestBody),
      },
      response: {
        status: x.status,
        headers: receiptHeaders(x.responseHeaders),
        body: bodyDigest(x.responseBody),
      },
    },
    { request: x.requestBody, response: x.responseBody },
  );
  if (receipt) {
    headers["svc-receipt-id"] = receipt.id;
    headers["svc-receipt"] = receipt.jws;
  }
  return headers;
}
