import type { MiddlewareInput } from "../config/schema.ts";
import type { Handler, Middleware } from "../http/types.ts";
import { dummy } from "./dummy.ts";

/**
 * The ordered middleware chain of specification 4.3: the first entry sees the request first and the
 * response last. Middlewares plug in here by type; listeners never know which ones exist.
 */
export type MiddlewareFactory = (options: MiddlewareInput) => Middleware;

const registry = new Map<string, MiddlewareFactory>([
  ["dummy", (o) => dummy(o as Extract<MiddlewareInput, { type: "dummy" }>)],
]);

export function registerMiddleware(type: string, factory: MiddlewareFactory): void {
  registry.set(type, factory);
}

export function buildChain(entries: readonly MiddlewareInput[], terminal: Handler): Handler {
  const middlewares = entries.map((e) => {
    const factory = registry.get(e.type);
    if (!factory) throw new Error(`middleware ${e.type} is not available in this build`);
    return factory(e);
  });
  return middlewares.reduceRight<Handler>((next, m) => (req) => m(req, next), terminal);
}
