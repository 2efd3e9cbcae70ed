/**
 * A request its caller cancelled (reset its HTTP/2 stream, closed its connection) is the caller's doing,
 * not a failure, on every HTTP path: counted under CALLER_CLOSED and logged at debug.
 */
import type { Logger } from "../log.ts";

/** The status an exchange its caller cancelled is counted under: nginx's "client closed request". */
export const CALLER_CLOSED = 499;
/** Cancellations are summed up in one info line at most this often, when there are this many. */
const CANCEL_REPORT_MS = 10_000;
const CANCEL_REPORT_MIN = 10;

/**
 * Cancelled requests are the caller's doing, not a failure: each is logged at debug, and a burst of them
 * (CANCEL_REPORT_MIN or more within CANCEL_REPORT_MS) is one info line with the count.
 */
export function cancellationReport(log: Logger): () => void {
  let count = 0;
  let armed = false;
  return () => {
    count++;
    if (armed) return;
    armed = true;
    setTimeout(() => {
      if (count >= CANCEL_REPORT_MIN)
        log.info("requests cancelled by their callers", { count, seconds: CANCEL_REPORT_MS / 1000 });
      count = 0;
      armed = false;
    }, CANCEL_REPORT_MS).unref();
  };
}
