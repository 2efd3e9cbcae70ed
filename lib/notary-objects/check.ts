/**
 * What `svc curl` checks on a notarized response (docs/svc-curl.md, "What is verified"; the objects in
 * docs/notary.md, "Formats"): the Svc-Workload-ID header, the statement it names (from
 * Svc-Workload-Statement, or fetched by the caller), signed by the peer it talked to when that is known;
 * with a receipt, that the statement's issuer signed it and that it describes this exchange, the request
 * named by the X-Request-Id the caller sent.
 */
import { SvcError } from "../errors.ts";
import type { Authorizer } from "../spiffe/authorizer.ts";
import type { BundleSource } from "../spiffe/bundle.ts";
import type { SpiffeId } from "../spiffe/id.ts";
import { STREAM_HEADER } from "./levels.ts";
import { type ReceiptClaims, verifyReceipt } from "./receipt.ts";
import { type StatementClaims, verifyStatement } from "./statement.ts";

export interface Sent {
  method: string;
  path: string;
  body: Uint8Array;
  /** The X-Request-Id sent. */
  requestId: string;
}

export interface Notarization {
  statement: { id: string; jws: string; claims: StatementClaims };
  receipt?: { id: string; jws: string; claims: ReceiptClaims };
}

type Headers = Record<string, string | string[] | undefined>;

const one = (h: Headers, name: string) => {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
};

/** Any fault while checking (a statement that is not JSON, a fetch answer that is not) is that check's failure. */
async function failingAs<T>(
  code: "statement" | "receipt",
  what: string,
  check: () => Promise<T>,
): Promise<T> {
  try {
    return await check();
  } catch (e) {
    if (e instanceof SvcError) throw e;
    throw new SvcError(code, `${what} verification failed: ${(e as Error).message}`);
  }
}

export function checkStatement(
  headers: Headers,
  bundles: BundleSource,
  fetchStatement: (id: string) => Promise<string | undefined>,
  peer?: SpiffeId,
  notaries?: Authorizer,
): Promise<Notarization["statement"]> {
  return failingAs("statement", "workload statement", async () => {
    const id = one(headers, "svc-workload-id");
    if (!id)
      throw new SvcError(
        "statement",
        "workload statement verification is required (--validate=true) but the response has no Svc-Workload-ID header; the server is not behind an svc-proxy notary (use --validate=false for servers outside the service)",
      );
    const jws = one(headers, "svc-workload-statement") ?? (await fetchStatement(id));
    if (!jws)
      throw new SvcError("statement", `workload statement verification failed: statement ${id} not found`);
    const v = await verifyStatement(jws, bundles, id);
    if (peer && v.issuer.uri !== peer.uri)
      throw new SvcError(
        "statement",
        `workload statement verification failed: issued by ${v.issuer.uri}, but the server is ${peer.uri}`,
      );
    const allowed = notaries?.(v.issuer);
    if (allowed && !allowed.allowed)
      throw new SvcError(
        "statement",
        `workload statement verification failed: not issued by a notary --notary-id allows: ${allowed.reason}`,
      );
    return { id, jws: jws.trim(), claims: v.claims };
  });
}

/**
 * The receipt in the Svc-Receipt-ID and Svc-Receipt headers, or, for a streamed answer, the one its
 * Svc-Stream-ID names, fetched once the stream ended: it must record that stream.
 */
export function checkReceipt(
  headers: Headers,
  bundles: BundleSource,
  statement: { id: string; issuer: string },
  sent: Sent,
  received: { status: number; body: Uint8Array },
  fetchStreamReceipt: (streamId: string) => Promise<string | undefined>,
): Promise<NonNullable<Notarization["receipt"]>> {
  return failingAs("receipt", "receipt", async () => {
    const streamId = one(headers, STREAM_HEADER);
    let id = one(headers, "svc-receipt-id");
    let jws = one(headers, "svc-receipt");
    if (!jws && streamId) {
      jws = await fetchStreamReceipt(streamId);
      if (!jws)
        throw new SvcError(
          "receipt",
          `receipt verification failed: the notary has no receipt for stream ${streamId} (Svc-Stream-ID)`,
        );
    }
    if (!jws || (!id && !streamId))
      throw new SvcError(
        "receipt",
        "receipt verification failed: signRequest was asked for but the response has no Svc-Receipt-ID and Svc-Receipt headers, nor the Svc-Stream-ID of a streamed answer",
      );
    const v = await verifyReceipt(jws, bundles, {
      ...(id ? { expectedId: id } : {}),
      statementId: statement.id,
      issuer: statement.issuer,
      requestId: sent.requestId,
      request: sent,
      response: received,
    });
    const recorded = v.claims.svc.response.stream?.id;
    if (streamId !== undefined && recorded !== streamId)
      throw new SvcError(
        "receipt",
        `receipt verification failed: it records ${recorded ? `stream ${recorded}` : "no stream"}, the answer was stream ${streamId}`,
      );
    id ??= v.id;
    return { id, jws: jws.trim(), claims: v.claims };
  });
}
