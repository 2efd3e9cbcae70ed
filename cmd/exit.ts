import { type ErrorCode, isSvcError } from "../lib/errors.ts";

/** The one place where error codes become exit statuses. Users see the message, never a stack. */
const EXIT: Partial<Record<ErrorCode, number>> = { usage: 1 };

export function exitWith(program: string, e: unknown): never {
  const debug = process.env.SVC_DEBUG === "true";
  if (isSvcError(e)) {
    process.stderr.write(`${program}: ${e.message}\n`);
    process.exit(EXIT[e.code] ?? 1);
  }
  const err = e as Error;
  process.stderr.write(`${program}: ${err?.message ?? String(e)}\n`);
  if (debug && err?.stack) process.stderr.write(`${err.stack}\n`);
  process.exit(1);
}
