import type { ListenerEvents } from "../../listener.ts";
import type { Logger } from "../../log.ts";
import type { Timeouts } from "../../timeouts.ts";
import type { RelayTarget } from "../relay/target.ts";

/** What every HTTP/2 caller connection of one relay listener shares. */
export interface H2Context {
  /** How the target is reached (ALPN h2 over TLS). */
  target: RelayTarget;
  targetUrl: URL;
  timeouts: Timeouts;
  log: Logger;
  /** Debug logging is on: one log line per stream. */
  debug: boolean;
  events: ListenerEvents | undefined;
  /** Told of each stream its caller cancelled (proxy/http/cancelled.ts). */
  cancelled(): void;
}
