import { type CommandLine, extendGrammar, type FlagTable, parseCommandLine } from "../../lib/kube/grammar.ts";
import { subCommands } from "./commands.ts";

/**
 * The command line as kubectl reads it, with svc's own commands (they replace kubectl's `version` and
 * `completion`) and the flags svc adds to kubectl's commands: the compartment filters of `get`, and
 * `--force` (the compartment override) where kubectl has none. On apply, replace, delete and run,
 * `--force` is kubectl's and keeps kubectl's meaning; svc reads it as the override request too.
 */
const FORCE: FlagTable = { force: ["b"] };

const SVC_FLAGS: Record<string, FlagTable> = {
  get: {
    "current-compartment": ["b"],
    compartment: ["v"],
    "exclude-current-compartment": ["b"],
    "filter-compartment": ["o"],
  },
  exec: FORCE,
  attach: FORCE,
  cp: FORCE,
  "port-forward": FORCE,
  debug: FORCE,
  label: FORCE,
  annotate: FORCE,
  patch: FORCE,
  edit: FORCE,
  create: FORCE,
  "create job": FORCE,
  expose: FORCE,
  "apply edit-last-applied": FORCE,
};

const svcGrammar = extendGrammar(Object.keys(subCommands), SVC_FLAGS);

export function readLine(args: string[]): CommandLine {
  return parseCommandLine(args, svcGrammar);
}

/** svc's own flags on this command: removed before kubectl runs. */
export function svcFlags(line: CommandLine): Set<string> {
  const key = line.path.join(" ");
  return new Set(Object.hasOwn(SVC_FLAGS, key) ? Object.keys(SVC_FLAGS[key] as FlagTable) : []);
}
