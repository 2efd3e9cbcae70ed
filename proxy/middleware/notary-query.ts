/**
 * The notary query routes (docs/notary.md, "Query routes"): GET /.svc/workload/{id}, /.svc/certificate/{id},
 * /.svc/receipt/{id}, /.svc/receipt/{id}/proof (the receipt's inclusion proof in the notary log, with
 * a signed tree head; with ?witnessed=N[&witness=ID…], one that N (of those) witnesses cosigned, with their
 * cosignatures), and /.svc/stream/{id} (the receipt of the stream a caller was told the ID of in
 * Svc-Stream-ID), /.svc/log/consistency?from=N&to=M (the log's consistency proof between two sizes,
 * with a signed tree head of each) and /.svc/log/checkpoint (the log now as a C2SP checkpoint), answered
 * from the notary database (docs/notary.md shows the bodies).
 * Access is the listener's: whoever passed source.spiffe_ids. Other paths go on.
 */
import { isSvcError } from "../../lib/errors.ts";
import { treeSize } from "../../lib/notary-objects/checkpoint.ts";
import { MAX_COSIGNATURES } from "../../lib/notary-objects/cosignature.ts";
import { isContentId } from "../../lib/notary-objects/ids.ts";
import { derToPem } from "../../lib/spiffe/cert.ts";
import { parseSpiffeId } from "../../lib/spiffe/id.ts";
import { type Middleware, type ProxyResponse, proxyResponse } from "../http/types.ts";
import type { Logger } from "../log.ts";
import type { Witnessed } from "../notary-service/store.ts";
import type { MiddlewareContext } from "./context.ts";

const ROUTE = /^\/\.svc\/(workload|certificate|receipt|stream)\/([^/?]*)(\/proof)?(\?.*)?$/;

const LOG = /^\/\.svc\/log\/(consistency|checkpoint)(\?.*)?$/;

export function notaryQuery(ctx: MiddlewareContext): Middleware {
  return async (req, next) => {
    const m = ROUTE.exec(req.path);
    const c = m ? undefined : LOG.exec(req.path);
    if (!m && !c) return next(req);
    const notary = ctx.notary;
    if (!notary) return proxyResponse(503, "notary-query: the notary is not enabled (notary.enable)");
    if (req.method !== "GET" && req.method !== "HEAD") {
      const r = proxyResponse(405, `notary-query: ${req.method} is not allowed; use GET`);
      r.headers.allow = "GET, HEAD";
      return r;
    }
    if (c?.[1] === "checkpoint") return checkpoint(notary, ctx.listener.target.origin, req.log);
    if (c)
      return consistency(
        notary,
        new URLSearchParams(c[2]?.slice(1) ?? ""),
        ctx.listener.target.origin,
        req.log,
      );
    const [, kind, id, proof, query] = m as unknown as [
      string,
      string,
      string,
      string | undefined,
      string | undefined,
    ];
    const witnessed = proof ? witnessedParam(new URLSearchParams(query?.slice(1) ?? "")) : { count: 0 };
    if (typeof witnessed === "string") return proxyResponse(400, `notary-query: ${witnessed}`);
    if (proof && kind !== "receipt")
      return proxyResponse(
        404,
        `notary-query: only receipts have inclusion proofs, not ${kind === "workload" ? "statements" : kind === "stream" ? "streams (ask for the proof of the stream's receipt: /.svc/receipt/{id}/proof)" : "certificates"}`,
      );
    if (!isContentId(id))
      return proxyResponse(
        400,
        `notary-query: malformed ${kind} id ${JSON.stringify(id)}: expected 43 base64url characters`,
      );
    return answered(req.log, proof ? "inclusion proof" : kind, async () => {
      notary.checkServing();
      const found = proof
        ? await notary.proof(id, ctx.listener.target.origin, witnessed)
        : await lookup(notary.store, kind, id);
      if (found) return json(found);
      return proxyResponse(
        404,
        kind === "stream"
          ? `notary-query: no receipt for stream ${id} (a stream's receipt is recorded when the stream ends, at signRequest)`
          : `notary-query: no ${kind} with id ${id}`,
      );
    });
  };
}

/**
 * A query's answer from `produce`: the notary refusing or its store unreachable is a 503 (logged), a size
 * it does not have (SvcError "usage") a 404 saying there is no `what`.
 */
async function answered(
  log: Logger,
  what: string,
  produce: () => Promise<ProxyResponse>,
): Promise<ProxyResponse> {
  try {
    return await produce();
  } catch (e) {
    if (isSvcError(e, "usage")) return proxyResponse(404, `notary-query: no ${what}: ${e.message}`);
    if (!isSvcError(e, "notary_unavailable")) throw e;
    log.error("notary unavailable", { reason: e.message });
    return proxyResponse(503, `notary-query: unavailable: ${e.message}`);
  }
}

const json = (value: object): ProxyResponse => ({
  status: 200,
  headers: { "content-type": "application/json", "cache-control": "no-store" },
  body: `${JSON.stringify(value, null, 2)}\n`,
});

/** GET /.svc/log/consistency?from=N[&to=M] (docs/notary.md, "Consistency proofs"). */
async function consistency(
  notary: NonNullable<MiddlewareContext["notary"]>,
  query: URLSearchParams,
  origin: string,
  log: Logger,
): Promise<ProxyResponse> {
  const leaves = "leaves (0 or more, decimal)";
  const from = oneNumber(query, "from", MAX_LEAVES, leaves) ?? "from is required: a number of leaves";
  const to = oneNumber(query, "to", MAX_LEAVES, leaves);
  for (const v of [from, to]) if (typeof v === "string") return proxyResponse(400, `notary-query: ${v}`);
  return answered(log, "consistency proof", async () =>
    json(await notary.consistency(from as number, to as number | undefined, origin)),
  );
}

/** GET /.svc/log/checkpoint (docs/notary.md, "Checkpoints"): the note, its JWS tree head in Svc-Tree-Head. */
async function checkpoint(
  notary: NonNullable<MiddlewareContext["notary"]>,
  origin: string,
  log: Logger,
): Promise<ProxyResponse> {
  return answered(log, "checkpoint", async () => {
    const c = await notary.checkpoint(origin);
    return {
      status: 200,
      headers: {
        "content-type": "text/plain; charset=utf-8",
        "cache-control": "no-store",
        "svc-tree-head": c.treeHead,
      },
      body: c.note,
    };
  });
}

/**
 * `witnessed=N` of an inclusion proof: how many witnesses must have cosigned its tree head (0 to 32), and
 * `witness=ID` (repeatable): which of them count (any when none is named).
 */
function witnessedParam(query: URLSearchParams): Witnessed | string {
  const v = oneNumber(query, "witnessed", MAX_COSIGNATURES, `witnesses from 0 to ${MAX_COSIGNATURES}`);
  const by = query.getAll("witness");
  if (v === undefined)
    return by.length ? "witness=… goes with witnessed=N: how many of them must have cosigned" : { count: 0 };
  if (typeof v === "string") return v;
  if (by.length > MAX_COSIGNATURES) return `more than ${MAX_COSIGNATURES} witness=… parameters`;
  if (new Set(by).size !== by.length) return "a witness=… is given twice";
  if (by.length > 0 && v > by.length) return `witnessed=${v} is more than the ${by.length} witness=… named`;
  for (const id of by) {
    try {
      parseSpiffeId(id);
    } catch (e) {
      return `witness=${JSON.stringify(id)}: ${(e as Error).message}`;
    }
  }
  return { count: v, ...(by.length ? { by } : {}) };
}

/** The largest number of leaves a query may name (fifteen digits). */
const MAX_LEAVES = 999_999_999_999_999;

/**
 * The one decimal value of `name` in `query`, from 0 to `max`: undefined when it is not given, else the
 * 400's reason (given twice, not decimal, too large), saying it is not one number of `what`.
 */
function oneNumber(
  query: URLSearchParams,
  name: string,
  max: number,
  what: string,
): number | undefined | string {
  const values = query.getAll(name);
  if (values.length === 0) return undefined;
  const v = values[0] as string;
  const n = treeSize(v);
  if (values.length > 1 || n === undefined || n > max)
    return `${name}=${JSON.stringify(values.join(","))} is not one number of ${what}`;
  return n;
}

type Store = NonNullable<MiddlewareContext["notary"]>["store"];

async function lookup(store: Store, kind: string, id: string): Promise<object | undefined> {
  if (kind === "workload") {
    const s = await store.statement(id);
    return (
      s && {
        id: s.id,
        subject: s.subject,
        certificateID: s.certificateId,
        createdAt: s.createdAt,
        statement: s.jws,
      }
    );
  }
  if (kind === "certificate") {
    const c = await store.certificate(id);
    return c && { id: c.id, spiffeId: c.spiffeId, notAfter: c.notAfter, pem: derToPem(c.der) };
  }
  const receiptId = kind === "stream" ? await store.streamReceipt(id) : id;
  const r = receiptId === undefined ? undefined : await store.receipt(receiptId);
  if (!r) return undefined;
  const x = r.exchange;
  const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");
  return {
    id: r.id,
    workloadStatementID: r.statementId,
    requestID: x.requestId,
    createdAt: r.createdAt,
    receipt: r.jws,
    request: { method: x.method, path: x.path, headers: x.requestHeaders, bodyBase64: b64(x.requestBody) },
    response: { status: x.status, headers: x.responseHeaders, bodyBase64: b64(x.responseBody) },
  };
}
