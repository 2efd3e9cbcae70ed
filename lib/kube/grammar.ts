/**
 * kubectl's command-line grammar, read the way kubectl itself reads it (cobra v1.8 and pflag v1.0, as
 * built into kubectl v1.32), so that svc's guards see exactly the command, flags and arguments that
 * kubectl will act on:
 *
 * 1. The command is found as cobra finds it: from the root, words that are flags are skipped — a `--flag`
 *    without `=` that is not known to take no value, and a two-letter `-f` likewise, also skip the next
 *    word (cobra assumes an unknown flag takes one) — and the first remaining word names a subcommand
 *    (or an alias); the first occurrence of that word is removed and the search goes on one level down.
 * 2. The words left are parsed with the found command's flags plus the global ones, as pflag does:
 *    `--name=v`, `--name v`, `-nv`, `-n=v`, `-n v`, grouped booleans (`-it`), `--` ending the flags, `_`
 *    read as `-` in long names. Booleans take no next word; flags with an optional value (`--dry-run`,
 *    `--validate`, `--cascade`) take one only after `=`.
 * 3. A first word that is no command is a plugin (kubectl-<word>), whose words are not kubectl's.
 *
 * The flag table (lib/kube/kubectl-commands.json) is generated from kubectl's own help by
 * tests/support/kubectl-grammar-gen.ts.
 */
import { SvcError } from "../errors.ts";
import table from "./kubectl-commands.json" with { type: "json" };

type Shape = "b" | "v" | "o";
export type FlagTable = Record<string, [Shape] | [Shape, string] | string[]>;
export interface CommandSpec {
  aliases?: string[];
  flags: FlagTable;
  sub?: Record<string, CommandSpec>;
}

const GLOBALS = table.globals as FlagTable;
const KUBECTL_COMMANDS = table.commands as unknown as Record<string, CommandSpec>;

export interface FlagUse {
  /** The long name (normalized: `_` read as `-`). */
  name: string;
  /** The value; booleans are "true" or "false". */
  value: string;
  global: boolean;
  /** The indexes in the command line of the words that gave it: the flag, and its value if apart. */
  words: number[];
}

export interface CommandLine {
  /** The command path with aliases resolved: ["exec"], ["create", "configmap"], [] for none. */
  path: string[];
  /** The indexes in `args` of the words that named the command path. */
  pathWords: number[];
  /** The first word is no command: kubectl runs the plugin `kubectl-<word>`; flags are not parsed. */
  plugin: boolean;
  flags: FlagUse[];
  /** Arguments that are not flags: before `--`, and after it too for commands that run no command. */
  positionals: string[];
  /** The words after `--`, or undefined when there is no `--`. */
  rest?: string[];
  /** The usage error kubectl reports for this line (unknown flag, missing value), if any. */
  error?: string;
  /** The words as given. */
  args: string[];
}

interface FlagDef {
  name: string;
  shape: Shape;
  global: boolean;
}

class FlagSet {
  private readonly long = new Map<string, FlagDef>();
  private readonly short = new Map<string, FlagDef>();

  constructor(local: FlagTable, extra: FlagTable = {}, help = false) {
    for (const [tableFlags, global] of [
      [GLOBALS, true],
      [local, false],
      [extra, false],
    ] as const)
      for (const [name, [shape, short]] of Object.entries(tableFlags)) {
        const def = { name, shape: shape as Shape, global };
        this.long.set(name, def);
        if (short) this.short.set(short, def);
      }
    if (help && !this.long.has("help")) {
      const def: FlagDef = { name: "help", shape: "b", global: false };
      this.long.set("help", def);
      if (!this.short.has("h")) this.short.set("h", def);
    }
  }

  byName(name: string): FlagDef | undefined {
    return this.long.get(name.replaceAll("_", "-"));
  }

  byShort(c: string): FlagDef | undefined {
    return this.short.get(c);
  }
}

/** The commands svc reads: kubectl's, with svc's own commands and flags added by the caller. */
export interface Grammar {
  commands: Record<string, CommandSpec>;
}

const kubectlGrammar: Grammar = { commands: KUBECTL_COMMANDS };

/**
 * kubectl's grammar with svc's own top-level commands (replacing kubectl's of the same name; their flags
 * are theirs, not read here) and svc's own flags added to some commands (keyed by command path: "get",
 * "apply edit-last-applied").
 */
/** A kubectl command's path and those of all its subcommands, at every depth ("create", "create secret", …). */
export function commandPaths(command: string): string[] {
  const walk = (path: string, spec: CommandSpec): string[] => [
    path,
    ...Object.entries(spec.sub ?? {}).flatMap(([name, sub]) => walk(`${path} ${name}`, sub)),
  ];
  const spec = Object.hasOwn(KUBECTL_COMMANDS, command) ? KUBECTL_COMMANDS[command] : undefined;
  return spec ? walk(command, spec) : [];
}

export function extendGrammar(own: string[], extraFlags: Record<string, FlagTable>): Grammar {
  const withFlags = (
    subs: Record<string, CommandSpec>,
    [head, ...rest]: string[],
    flags: FlagTable,
  ): Record<string, CommandSpec> => {
    const spec = Object.hasOwn(subs, head as string) ? subs[head as string] : undefined;
    if (!spec) throw new Error(`grammar: no command ${head}`);
    const changed: CommandSpec =
      rest.length > 0
        ? { ...spec, sub: withFlags(spec.sub ?? {}, rest, flags) }
        : { ...spec, flags: { ...spec.flags, ...flags } };
    return { ...subs, [head as string]: changed };
  };
  let commands: Record<string, CommandSpec> = { ...KUBECTL_COMMANDS };
  for (const name of own) commands[name] = { flags: {} };
  for (const [path, flags] of Object.entries(extraFlags))
    commands = withFlags(commands, path.split(" "), flags);
  return { commands };
}

function findNext(
  subs: Record<string, CommandSpec> | undefined,
  word: string,
): [string, CommandSpec] | undefined {
  if (!subs) return undefined;
  if (Object.hasOwn(subs, word)) return [word, subs[word] as CommandSpec];
  for (const [name, spec] of Object.entries(subs)) if (spec.aliases?.includes(word)) return [name, spec];
  return undefined;
}

/** cobra's rule for "this flag word takes the next word": used only while finding the command. */
function takesNext(word: string, flags: FlagSet): boolean {
  if (word.includes("=")) return false;
  if (word.startsWith("--")) return !hasNoOpt(flags.byName(word.slice(2)));
  return word.length === 2 && !hasNoOpt(flags.byShort(word.slice(1)));
}

function hasNoOpt(def: FlagDef | undefined): boolean {
  return def !== undefined && def.shape !== "v";
}

/** cobra's stripFlags: the words that are not flags or (assumed) flag values, before `--`. */
function stripFlags(args: string[], flags: FlagSet): string[] {
  const words: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const s = args[i] as string;
    if (s === "--") break;
    if (s.startsWith("-") && takesNext(s, flags)) {
      if (args.length - i - 1 <= 1) break;
      i++;
      continue;
    }
    if (s !== "" && !s.startsWith("-")) words.push(s);
  }
  return words;
}

/** cobra's argsMinusFirstX: the index of the first `x` that is not a flag value, or -1. */
function firstWord(args: string[], x: string, flags: FlagSet): number {
  for (let i = 0; i < args.length; i++) {
    const s = args[i] as string;
    if (s === "--") return -1;
    if (s.startsWith("-") && takesNext(s, flags)) {
      i++;
      continue;
    }
    if (!s.startsWith("-") && s === x) return i;
  }
  return -1;
}

const BOOL_WORDS: Record<string, string> = {
  "1": "true",
  t: "true",
  T: "true",
  TRUE: "true",
  true: "true",
  True: "true",
  "0": "false",
  f: "false",
  F: "false",
  FALSE: "false",
  false: "false",
  False: "false",
};

/** The commands for which the words after `--` are a command to run (cobra's ArgsLenAtDash). */
const DASH_COMMANDS = new Set(["exec", "debug", "run", "create deployment", "create job", "create cronjob"]);

/** pflag's reading of a boolean flag's value (Go's strconv.ParseBool), or kubectl's usage error. */
function parseBool(value: string, flag: string): { value: string } | { error: string } {
  const b = Object.hasOwn(BOOL_WORDS, value) ? BOOL_WORDS[value] : undefined;
  return b !== undefined
    ? { value: b }
    : {
        error: `invalid argument "${value}" for "${flag}" flag: strconv.ParseBool: parsing "${value}": invalid syntax`,
      };
}

export function parseCommandLine(args: string[], grammar: Grammar = kubectlGrammar): CommandLine {
  // 1. Find the command, level by level; `index` maps the remaining words to their place in `args`.
  let index = args.map((_, i) => i);
  let subs: Record<string, CommandSpec> | undefined = grammar.commands;
  let spec: CommandSpec = { flags: {} };
  const path: string[] = [];
  const pathWords: number[] = [];
  for (;;) {
    const flags = new FlagSet(spec.flags);
    const words = stripFlags(
      index.map((i) => args[i] as string),
      flags,
    );
    const next = words[0] === undefined ? undefined : findNext(subs, words[0]);
    if (!next) {
      if (path.length === 0 && words.length > 0) return pluginLine(args);
      break;
    }
    const at = firstWord(
      index.map((i) => args[i] as string),
      words[0] as string,
      flags,
    );
    pathWords.push(index[at] as number);
    index = index.filter((_, k) => k !== at);
    path.push(next[0]);
    spec = next[1];
    subs = spec.sub;
  }
  // 2. Parse the remaining words with the command's flags and the global ones.
  const flags = new FlagSet(spec.flags, {}, true);
  const line: CommandLine = { path, pathWords, plugin: false, flags: [], positionals: [], args };
  const use = (def: FlagDef, value: string, words: number[]) =>
    line.flags.push({ name: def.name, value, global: def.global, words: [...words] });
  for (let k = 0; k < index.length && line.error === undefined; k++) {
    const at = index[k] as number;
    const s = args[at] as string;
    const words = [at];
    const nextWord = (): string | undefined => {
      if (k + 1 >= index.length) return undefined;
      k++;
      words.push(index[k] as number);
      return args[index[k] as number];
    };
    if (s.length < 2 || !s.startsWith("-")) {
      line.positionals.push(s);
      continue;
    }
    if (s === "--") {
      line.rest = index.slice(k + 1).map((i) => args[i] as string);
      // Only the commands that take a command to run read `--` as its start; for every other command the
      // words after it are ordinary arguments (`kubectl label pod x -- key=value`).
      if (!DASH_COMMANDS.has(path.join(" "))) line.positionals.push(...line.rest);
      break;
    }
    if (s.startsWith("--")) {
      const body = s.slice(2);
      if (body === "" || body.startsWith("-") || body.startsWith("=")) {
        line.error = `bad flag syntax: ${s}`;
        break;
      }
      const eq = body.indexOf("=");
      const name = eq >= 0 ? body.slice(0, eq) : body;
      const def = flags.byName(name);
      if (!def) {
        line.error = `unknown flag: --${name}`;
        break;
      }
      let value: string | undefined;
      if (eq >= 0) value = body.slice(eq + 1);
      else if (def.shape === "b") value = "true";
      else if (def.shape === "o") value = "";
      else {
        value = nextWord();
        if (value === undefined) {
          line.error = `flag needs an argument: ${s}`;
          break;
        }
      }
      if (def.shape === "b") {
        const b = parseBool(value, `--${def.name}`);
        if ("error" in b) {
          line.error = b.error;
          break;
        }
        value = b.value;
      }
      use(def, value, words);
      continue;
    }
    // Short flags: a group of booleans, the last of which may take a value.
    let shorts = s.slice(1);
    while (shorts.length > 0) {
      const c = shorts[0] as string;
      const def = flags.byShort(c);
      if (!def) {
        line.error = `unknown shorthand flag: '${c}' in ${s}`;
        break;
      }
      let value: string;
      if (shorts.length > 2 && shorts[1] === "=") {
        value = shorts.slice(2);
        shorts = "";
      } else if (def.shape !== "v") {
        value = def.shape === "b" ? "true" : "";
        shorts = shorts.slice(1);
      } else if (shorts.length > 1) {
        value = shorts.slice(1);
        shorts = "";
      } else {
        const v = nextWord();
        if (v === undefined) {
          line.error = `flag needs an argument: '${c}' in ${s}`;
          break;
        }
        value = v;
        shorts = "";
      }
      if (def.shape === "b") {
        const b = parseBool(value, `-${c}, --${def.name}`);
        if ("error" in b) {
          line.error = b.error;
          break;
        }
        value = b.value;
      }
      use(def, value, words);
    }
  }
  return line;
}

function pluginLine(args: string[]): CommandLine {
  const end = args.indexOf("--");
  return {
    path: [],
    pathWords: [],
    plugin: true,
    flags: [],
    positionals: (end >= 0 ? args.slice(0, end) : args).filter((a) => !a.startsWith("-")),
    ...(end >= 0 ? { rest: args.slice(end + 1) } : {}),
    args,
  };
}

/** The last value of a flag (pflag: the last one wins), or undefined when it was not given. */
export function flagValue(line: CommandLine, name: string): string | undefined {
  let value: string | undefined;
  for (const f of line.flags) if (f.name === name) value = f.value;
  return value;
}

/** Every value of a repeatable flag (`--as-group a --as-group b`), in order. */
export function flagValues(line: CommandLine, name: string): string[] {
  return line.flags.filter((f) => f.name === name).map((f) => f.value);
}

/**
 * The files of `-f`/`--filename`, a string slice in kubectl: every use, each split at commas
 * (`-f a.yaml,b.yaml`). pflag reads a slice as CSV; a value with a quote is refused rather than guessed.
 */
export function filenames(line: CommandLine): string[] {
  const values = flagValues(line, "filename");
  const quoted = values.find((v) => v.includes('"'));
  if (quoted !== undefined)
    throw new SvcError(
      "usage",
      `-f ${JSON.stringify(quoted)}: svc does not read quoted file lists; give -f once per file`,
    );
  return values.flatMap((v) => (v === "" ? [] : v.split(",")));
}

/** A boolean flag's final value. */
export function flagSet(line: CommandLine, name: string): boolean {
  return flagValue(line, name) === "true";
}

/** The command path as the user spelled it (aliases kept): the words to give kubectl first. */
export function commandWords(line: CommandLine): string[] {
  return line.pathWords.map((i) => line.args[i] as string);
}

/** `flags` added to kubectl's words before a `--`, after which kubectl reads every word as an argument. */
export function beforeDashes(rest: string[], flags: string[]): string[] {
  const dash = rest.indexOf("--");
  return dash >= 0 ? [...rest.slice(0, dash), ...flags, ...rest.slice(dash)] : [...rest, ...flags];
}

/**
 * The words after the command: `args` without the command path and without the uses of the named flags
 * (svc's own flags, removed before kubectl runs). kubectl reads `[...commandWords, ...flags, ...rest]` as
 * it reads the original line: cobra removes the command words wherever they stand.
 */
export function restWords(line: CommandLine, names: Set<string> = new Set()): string[] {
  const drop = new Set<number>(line.pathWords);
  for (const f of line.flags) if (names.has(f.name)) for (const w of f.words) drop.add(w);
  return line.args.filter((_, i) => !drop.has(i));
}
