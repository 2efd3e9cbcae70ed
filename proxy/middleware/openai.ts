/**
 * The chat-completions filter (docs/openai.md): only POST /v1/chat/completions passes
 * (others 403 unless allowUnknown); request bodies up to 1 MiB; fields outside the model removed from
 * request and response; with the notary, successfully parsed 200 JSON responses are notarized at the
 * level the caller asks for in Svc-Notarization-Level. `"stream": true` answers are passed on event by
 * event and notarized whole (openai-stream.ts).
 */
import { Readable } from "node:stream";
import { isSvcError } from "../../lib/errors.ts";
import { isLevel, LEVEL_HEADER, LEVELS, type Level } from "../../lib/notary-objects/levels.ts";
import { MAX_NOTARIZED_RESPONSE } from "../../lib/notary-objects/receipt.ts";
import type { MiddlewareInput } from "../config/schema.ts";
import { readBody } from "../http/full/body.ts";
import {
  isBuffered,
  type Middleware,
  type ProxyRequest,
  type ProxyResponse,
  proxyResponse,
  type Upstream,
} from "../http/types.ts";
import type { Logger } from "../log.ts";
import { notarizeExchange, statementHeaders } from "../notary-service/notarize-exchange.ts";
import type { MiddlewareContext } from "./context.ts";
import { applyModel, type FieldModel, MAX_DEPTH, REQUEST_MODEL, RESPONSE_MODEL } from "./openai-model.ts";
import { type StreamNotarization, streamAnswer } from "./openai-stream.ts";

export const PATH = "/v1/chat/completions";
const REQUEST_LIMIT = 1024 * 1024;
/** The whole response is buffered; this bounds the memory one response may take, and a stream's length. */
export const RESPONSE_LIMIT = MAX_NOTARIZED_RESPONSE;

export function openai(
  options: Extract<MiddlewareInput, { type: "openai" }>,
  ctx: MiddlewareContext,
): Middleware {
  const origin = ctx.listener.target.origin;
  return async (req, next) => {
    const path = req.path.split("?")[0];
    if (req.method !== "POST" || path !== PATH) {
      if (options.allowUnknown) return next(req);
      return proxyResponse(
        403,
        `openai: ${req.method} ${path} is not allowed here; only POST ${PATH} is (allowUnknown is false)`,
      );
    }
    const asked = req.headers[LEVEL_HEADER];
    delete req.headers[LEVEL_HEADER];
    const level = (Array.isArray(asked) ? asked[0] : asked) || "workload";
    if (!isLevel(level))
      return proxyResponse(
        400,
        `${LEVEL_HEADER}: unknown notarization level ${JSON.stringify(level)} (allowed: ${LEVELS.join(", ")})`,
      );
    if (Number(req.headers["content-length"] ?? 0) > REQUEST_LIMIT)
      return tooLarge(Number(req.headers["content-length"]));
    const body = await readBody(req.body, REQUEST_LIMIT);
    if (!body) return tooLarge();
    let parsed: unknown;
    try {
      parsed = JSON.parse(new TextDecoder().decode(body));
    } catch (e) {
      return proxyResponse(400, `openai: the request body is not JSON: ${(e as Error).message}`);
    }
    if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed))
      return proxyResponse(400, "openai: the request body must be a JSON object");
    const stream = (parsed as { stream?: unknown }).stream;
    if (stream !== undefined && stream !== false && stream !== null && stream !== true)
      return proxyResponse(
        400,
        `openai: "stream": ${JSON.stringify(stream)} is not a boolean; send "stream": true for a streamed answer or false`,
      );
    const sent = filtered(parsed, body, REQUEST_MODEL, req.log, "request");
    if (!sent) return proxyResponse(400, `openai: the request body nests deeper than ${MAX_DEPTH} levels`);
    req.headers["content-length"] = String(sent.length);
    delete req.headers["transfer-encoding"];
    // The filter reads plain bodies only: a compressed answer would pass it unread, and unnotarized.
    req.headers["accept-encoding"] = "identity";

    const res = await next({ ...req, body: Readable.from([Buffer.from(sent)]) });
    if (res.failure) return res;
    const coding = String(res.headers["content-encoding"] ?? "identity")
      .trim()
      .toLowerCase();
    if (coding !== "identity") {
      if (res.body instanceof Readable) res.body.destroy();
      return proxyResponse(
        502,
        `openai: the target answered with Content-Encoding ${JSON.stringify(coding)} although identity was asked; the filter reads only uncompressed bodies`,
      );
    }
    // A streamed request's error answer (JSON, not events) takes the path below, like any other.
    if (stream === true && res.status === 200) return streamed(req, res, level, body, sent);
    const answer = await readBody(res.body, RESPONSE_LIMIT);
    if (!answer) return proxyResponse(502, `openai: the response is larger than ${RESPONSE_LIMIT} bytes`);
    const out = json(res, answer);
    if (!out) return whole(res, answer);
    const bytes = filtered(out, answer, RESPONSE_MODEL, req.log, "response");
    if (!bytes) return proxyResponse(502, `openai: the response body nests deeper than ${MAX_DEPTH} levels`);
    const final = whole(res, bytes);
    if (!ctx.notary) return final;
    if (!res.upstream) {
      req.log.warn(NOT_A_WORKLOAD);
      return final;
    }
    try {
      const headers = await notarizeExchange(ctx.notary, level, origin, res.upstream, {
        req,
        requestBody: body,
        ...(sent !== body ? { forwardedBody: sent } : {}),
        status: final.status,
        responseHeaders: final.headers as Record<string, string>,
        responseBody: bytes,
        ...(bytes !== answer ? { upstreamBody: answer } : {}),
      });
      return { ...final, headers: { ...final.headers, ...headers } };
    } catch (e) {
      return notaryRefusal(e, req, res.upstream);
    }
  };

  /** A 200 answer to `"stream": true`: events, passed on as they come (openai-stream.ts). */
  async function streamed(
    req: ProxyRequest,
    res: ProxyResponse,
    level: Level,
    body: Uint8Array,
    sent: Uint8Array,
  ): Promise<ProxyResponse> {
    const target = isBuffered(res.body) ? Readable.from([Buffer.from(res.body)]) : res.body;
    const type = String(res.headers["content-type"] ?? "");
    if (!/^text\/event-stream\b/i.test(type)) {
      target.destroy();
      ctx.events?.chatStream("not_sse");
      req.log.warn("openai: stream ended", { end: "not_sse", content_type: type });
      return proxyResponse(
        502,
        `openai: the target answered a streamed request ("stream": true) with Content-Type ${JSON.stringify(type)}, not text/event-stream`,
      );
    }
    let notarize: StreamNotarization | undefined;
    // A target that fails while the statement is made is found destroyed by streamAnswer.
    const meanwhile = () => {};
    target.on("error", meanwhile);
    if (ctx.notary && !res.upstream) req.log.warn(NOT_A_WORKLOAD);
    else if (ctx.notary && res.upstream) {
      try {
        const statement = await statementHeaders(ctx.notary, res.upstream, origin);
        notarize = {
          notary: ctx.notary,
          level,
          origin,
          statementId: statement.id,
          headers: statement.headers,
        };
      } catch (e) {
        target.destroy();
        return notaryRefusal(e, req, res.upstream);
      }
    }
    target.removeListener("error", meanwhile);
    return streamAnswer({
      req,
      res: { ...res, body: target },
      requestBody: body,
      forwardedBody: sent,
      limit: RESPONSE_LIMIT,
      idleMs: ctx.listener.timeouts.idleMs,
      events: ctx.events,
      notarize,
    });
  }
}

const NOT_A_WORKLOAD =
  "openai: not notarized: the target is not an authenticated SPIFFE workload (docs/openai.md)";

/** The notary made no statement: 503 when it cannot store, else 502 naming the upstream. */
function notaryRefusal(e: unknown, req: ProxyRequest, upstream: Upstream): ProxyResponse {
  if (!isSvcError(e)) throw e;
  if (e.code === "notary_unavailable") {
    req.log.error("notary unavailable", { reason: e.message });
    return { ...proxyResponse(503, `notary: unavailable: ${e.message}`), failureCode: e.code };
  }
  req.log.warn("notary refused the upstream", { upstream: upstream.id.uri, reason: e.message });
  return {
    ...proxyResponse(
      502,
      `notary: no workload statement for ${upstream.id.uri}: ${e.message}`,
      "target-refused",
    ),
    failureCode: e.code,
  };
}

function tooLarge(length?: number): ProxyResponse {
  return proxyResponse(
    413,
    `openai: the request body${length ? ` (${length} bytes)` : ""} is over the limit of ${REQUEST_LIMIT} bytes (1 MiB)`,
  );
}

/**
 * The parsed body of a 200 JSON response, or undefined (other responses are not notarized: docs/openai.md).
 */
function json(res: ProxyResponse, body: Uint8Array): object | undefined {
  const type = String(res.headers["content-type"] ?? "");
  if (res.status !== 200 || body.length === 0 || !/^application\/([\w.+-]+\+)?json\b/i.test(type))
    return undefined;
  try {
    const v = JSON.parse(new TextDecoder().decode(body));
    return v !== null && typeof v === "object" ? v : undefined;
  } catch {
    return undefined;
  }
}

function whole(res: ProxyResponse, body: Uint8Array): ProxyResponse {
  const headers = { ...res.headers, "content-length": String(body.length) };
  delete headers["transfer-encoding"];
  return { ...res, headers, body };
}

/**
 * A body with the fields `model` does not define removed (logged at debug). Untouched, it goes on byte for
 * byte as `raw`, so that a caller's digest matches the receipt's. Undefined when it nests deeper than
 * MAX_DEPTH.
 */
function filtered(
  value: unknown,
  raw: Uint8Array,
  model: FieldModel,
  log: Logger,
  what: "request" | "response",
): Uint8Array | undefined {
  const removed: string[] = [];
  const kept = applyModel(value, model, removed);
  if (kept === undefined) return undefined;
  if (removed.length === 0) return raw;
  log.debug(`openai: ${what} fields removed`, { fields: removed });
  return new TextEncoder().encode(JSON.stringify(kept));
}
