import type { ListenerEvents } from "../../listener.ts";
import type { Logger } from "../../log.ts";
import type { Timeouts } from "../../timeouts.ts";
import type { UpstreamPool } from "./upstream.ts";

/** What every caller connection of one relay listener shares. */
export interface RelayContext {
  target: URL;
  pool: UpstreamPool;
  timeouts: Timeouts;
  log: Logger;
  /** Debug logging is on: one log line per exchange. */
  debug: boolean;
  events: ListenerEvents | undefined;
}
