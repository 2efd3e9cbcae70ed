import { type ErrorCode, isSvcError } from "../lib/errors.ts";
import { say } from "./say.ts";

/** The one place where error codes become exit statuses. Users see the message; a stack only when asked (SVC_DEBUG=true, --log-stacktrace). */
// svc curl's statuses (docs/svc-curl.md, "Exit codes"): 1 network, 2 statement, 3 receipt, 4 HTTP error.
const EXIT: Partial<Record<ErrorCode, number>> = {
  usage: 1,
  network: 1,
  statement: 2,
  receipt: 3,
  http_status: 4,
};

export function exitWith(program: string, e: unknown): never {
  const debug = process.env.SVC_DEBUG === "true";
  if (isSvcError(e)) {
    say(program, "error", e.message);
    if (debug && e.stack) process.stderr.write(`${e.stack}\n`);
    process.exit(EXIT[e.code] ?? 1);
  }
  const err = e as Error;
  say(program, "error", err?.message ?? String(e));
  if (debug && err?.stack) process.stderr.write(`${err.stack}\n`);
  process.exit(1);
}
