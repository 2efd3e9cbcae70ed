import type { MiddlewareInput } from "../config/schema.ts";
import type { Middleware } from "../http/types.ts";

/**
 * The diagnostic middleware (docs/proxy-http.md, "Middlewares"): logs each request and its response status;
 * with a nonempty `message`, adds it to the Svc-Dummy header of the request and of the response.
 */
export function dummy(options: Extract<MiddlewareInput, { type: "dummy" }>): Middleware {
  return async (req, next) => {
    req.log.info("dummy: request", { method: req.method, path: req.path, peer: req.peer?.uri });
    if (options.message) req.headers["svc-dummy"] = options.message;
    const res = await next(req);
    if (options.message) res.headers["svc-dummy"] = options.message;
    req.log.info("dummy: response", { status: res.status });
    return res;
  };
}
