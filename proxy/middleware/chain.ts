/**
 * The ordered middleware chain: the first entry sees the request first and the response last.
 * Middlewares plug in here by type; listeners never know which ones exist, and middlewares never import
 * this file (what they are built with is in context.ts).
 */
import type { OutgoingHttpHeaders } from "node:http";
import { NOTARY_HEADERS } from "../../lib/notary-objects/levels.ts";
import type { MiddlewareInput } from "../config/schema.ts";
import type { Handler } from "../http/types.ts";
import type { MiddlewareContext, MiddlewareFactory } from "./context.ts";
import { dummy } from "./dummy.ts";
import { notaryQuery } from "./notary-query.ts";
import { openai } from "./openai.ts";
import { witness } from "./witness.ts";

const registry = new Map<string, MiddlewareFactory>([
  ["dummy", (o) => dummy(o as Extract<MiddlewareInput, { type: "dummy" }>)],
  ["openai", (o, ctx) => openai(o as Extract<MiddlewareInput, { type: "openai" }>, ctx)],
  ["notary-query", (_o, ctx) => notaryQuery(ctx)],
  ["witness", (_o, ctx) => witness(ctx)],
]);

export function registerMiddleware(type: string, factory: MiddlewareFactory): void {
  registry.set(type, factory);
}

export function buildChain(
  entries: readonly MiddlewareInput[],
  terminal: Handler,
  ctx: MiddlewareContext,
): Handler {
  const middlewares = entries.map((e) => {
    const factory = registry.get(e.type);
    if (!factory) throw new Error(`middleware ${e.type} is not available in this build`);
    return factory(e, ctx);
  });
  return middlewares.reduceRight<Handler>(
    (next, m) => (req) => m(req, next),
    ctx.notary ? withoutNotaryHeaders(terminal) : terminal,
  );
}

/**
 * With the notary on, a target's own Svc-Workload-* and Svc-Receipt* response headers and trailers never
 * reach a caller of an HTTP listener (every one takes this path then: runtime.ts): a workload could otherwise pass off statements and receipts it made, or
 * old ones of this notary, as the notary's account of this exchange (docs/notary.md).
 */
function withoutNotaryHeaders(terminal: Handler): Handler {
  const strip = (fields: OutgoingHttpHeaders) => {
    for (const name of Object.keys(fields)) if (NOTARY_HEADERS.has(name.toLowerCase())) delete fields[name];
  };
  return async (req) => {
    const res = await terminal(req);
    strip(res.headers);
    // HTTP/2 trailers reach the caller too.
    const trailers = res.trailers;
    if (trailers)
      res.trailers = (listener) =>
        trailers((t) => {
          strip(t);
          listener(t);
        });
    return res;
  };
}
