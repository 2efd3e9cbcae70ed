import type { MiddlewareInput } from "../config/schema.ts";
import type { ListenerConfig } from "../config/types.ts";
import type { Middleware } from "../http/types.ts";
import type { ListenerEvents } from "../listener.ts";
import type { Notary } from "../notary-service/notary.ts";
import type { Witness } from "../witness/witness.ts";

/** What a middleware is built with: its listener, the notary (notary.enable) and the witness (witness). */
export interface MiddlewareContext {
  listener: ListenerConfig;
  /** Present when notary.enable is true. */
  notary?: Notary;
  /** Present when the witness section is set. */
  witness?: Witness;
  /** The listener's metrics, when metricsAddr is set. */
  events?: ListenerEvents;
}

export type MiddlewareFactory = (options: MiddlewareInput, ctx: MiddlewareContext) => Middleware;
