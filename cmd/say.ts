import type { ConsolaInstance, ConsolaReporter, createConsola } from "consola";

/**
 * What svc and svc-proxy say to a person on standard error: warnings, refusals, errors and notes such
 * as "statement verified". Standard output, which scripts parse, is never written here.
 *
 * On a terminal, consola's fancy reporter: a coloured badge or symbol per kind, the program as a tag
 * (NO_COLOR turns the colours off). Anywhere else (a pipe, a file, CI), one plain line per message,
 * exactly as svc has always written it: `svc: warning: …` for a warning, `svc: …` for the rest.
 * consola is loaded on the first message, so a command that says nothing never loads it.
 */
export type Kind = "warn" | "error" | "info" | "success";

let instance: ConsolaInstance | undefined;

const plain: ConsolaReporter = {
  log(o) {
    const prefix = o.tag ? `${o.tag}: ` : "";
    process.stderr.write(`${prefix}${o.type === "warn" ? "warning: " : ""}${o.args.join(" ")}\n`);
  },
};

function consola(): ConsolaInstance {
  if (!instance) {
    const create = (require("consola") as { createConsola: typeof createConsola }).createConsola;
    const fancy = process.stderr.isTTY === true;
    // `fancy` picks consola's fancy reporter; its typings leave the option out.
    const options = {
      // Every kind is said; what to leave out (--verbose, --log-level) is decided before calling.
      level: 5,
      fancy,
      // The fancy reporter writes notes to stdout unless told otherwise.
      stdout: process.stderr,
      stderr: process.stderr,
      ...(fancy ? {} : { reporters: [plain] }),
    };
    instance = create(options);
  }
  return instance;
}

/** A warning of svc's, for the lib/ modules that take a place to send warnings. */
export const svcWarning = (message: string): void => say("svc", "warn", message);

/** Says `message` (which may span lines) for `program`, e.g. "svc" or "svc curl". */
export function say(program: string, kind: Kind, message: string): void {
  consola().withTag(program)[kind](message);
}
