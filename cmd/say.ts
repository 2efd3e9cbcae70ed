/**
 * What svc and svc-proxy say to a person on standard error: warnings, refusals, errors and notes such
 * as "statement verified". Standard output, which scripts parse, is never written here.
 *
 * On a terminal, consola's fancy reporter: a coloured badge or symbol per kind, the program as a tag
 * (NO_COLOR turns the colours off). Anywhere else (a pipe, a file, CI), one plain line per message,
 * exactly as svc has always written it: `svc: warning: …` for a warning, `svc: …` for the rest.
 * consola is loaded on the first message said on a terminal, so a command that says nothing, and every
 * message off a terminal, never loads it.
 */
import type { ConsolaInstance, createConsola } from "consola";

type Kind = "warn" | "error" | "info" | "success";

let instance: ConsolaInstance | undefined;

function consola(): ConsolaInstance {
  if (!instance) {
    const create = (require("consola") as { createConsola: typeof createConsola }).createConsola;
    // `fancy` picks consola's fancy reporter; its typings leave the option out.
    const options = {
      // Every kind is said; what to leave out (--verbose, --log-level) is decided before calling.
      level: 5,
      fancy: true,
      // The fancy reporter writes notes to stdout unless told otherwise.
      stdout: process.stderr,
      stderr: process.stderr,
    };
    instance = create(options);
  }
  return instance;
}

/** A warning of svc's, for the lib/ modules that take a place to send warnings. */
export const svcWarning = (message: string): void => say("svc", "warn", message);

/** Says `message` (which may span lines) for `program`, e.g. "svc" or "svc curl". */
export function say(program: string, kind: Kind, message: string): void {
  if (process.stderr.isTTY === true) consola().withTag(program)[kind](message);
  else process.stderr.write(`${program}: ${kind === "warn" ? "warning: " : ""}${message}\n`);
}
