/**
 * The command line as kubectl reads it, with svc's own commands (they replace kubectl's `version` and
 * `completion`) and the flags svc adds to kubectl's commands: the compartment filters of `get`, and
 * `--force` (the compartment override) where kubectl has none. On apply, replace, delete and run,
 * `--force` is kubectl's and keeps kubectl's meaning; svc reads it as the override request too.
 */
import {
  type CommandLine,
  commandPaths,
  commandWords,
  extendGrammar,
  type FlagTable,
  parseCommandLine,
  restWords,
} from "../../lib/kube/grammar.ts";
import { contextFlags, type KubeTarget, withContext } from "../../lib/kube/kubectl.ts";
import { subCommands } from "./commands.ts";
import type { Guarded } from "./guards/guard.ts";

const FORCE: FlagTable = { force: ["b"] };

const SVC_FLAGS: Record<string, FlagTable> = {
  get: {
    "current-compartment": ["b"],
    compartment: ["v"],
    "exclude-current-compartment": ["b"],
    "filter-compartment": ["o"],
    ...FORCE,
  },
  describe: FORCE,
  logs: FORCE,
  exec: FORCE,
  attach: FORCE,
  cp: FORCE,
  "port-forward": FORCE,
  debug: FORCE,
  label: FORCE,
  annotate: FORCE,
  patch: FORCE,
  edit: FORCE,
  // create and every create SUBCOMMAND (objects made from arguments, guards/generated.ts), expose and
  // autoscale make objects svc marks, or refuses to.
  ...Object.fromEntries(commandPaths("create").map((path) => [path, FORCE])),
  expose: FORCE,
  autoscale: FORCE,
  "apply edit-last-applied": FORCE,
};

/** What svc's flags on kubectl's commands do: shown after kubectl's help, and by completion. */
const SVC_FLAG_HELP: Record<string, string> = {
  "current-compartment": "only objects of the current compartment",
  compartment: "only objects of this compartment label, such as UK-S-BRAVO",
  "exclude-current-compartment": "only objects of other compartments",
  "filter-compartment": "only objects of the current compartment, or of =LABEL",
  force: "override a compartment refusal, where the cluster allows you to (the override is logged)",
};

/** svc's flags on this kubectl command, each with what it does; none when svc adds none. */
export function svcFlagHelp(line: CommandLine): [string, string][] {
  return [...svcFlags(line)].map((name) => [`--${name}`, SVC_FLAG_HELP[name] ?? ""]);
}

const svcGrammar = extendGrammar(Object.keys(subCommands), SVC_FLAGS);

export function readLine(args: string[]): CommandLine {
  return parseCommandLine(args, svcGrammar);
}

/** svc's own flags on this command: removed before kubectl runs. */
export function svcFlags(line: CommandLine): Set<string> {
  const key = line.path.join(" ");
  return new Set(Object.hasOwn(SVC_FLAGS, key) ? Object.keys(SVC_FLAGS[key] as FlagTable) : []);
}

/**
 * The words kubectl runs with. A plugin gets the context after its name (kubectl refuses flags before
 * it). kubectl's own commands get it right after the command words, where no flag of the user's can take
 * it as its value; then the rest of the line (a guard's rewrite of it, or the line without svc's flags).
 */
export function kubectlArgs(
  line: CommandLine,
  target: KubeTarget,
  guarded: Partial<Pick<Guarded, "args" | "given" | "command">>,
  plugin: boolean,
): string[] {
  if (plugin) return withContext(line.args, target);
  const given = new Set([...line.flags.map((f) => f.name), ...(guarded.given ?? [])]);
  const rest = guarded.args ?? restWords(line, svcFlags(line));
  return [...(guarded.command ?? commandWords(line)), ...contextFlags(target, given), ...rest];
}
