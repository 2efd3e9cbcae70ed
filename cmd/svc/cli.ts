import type { ArgsDef, ParsedArgs } from "citty";
import { SvcError } from "../../lib/errors.ts";
import { exitWith } from "../exit.ts";

/** citty accepts any flag; svc refuses unknown ones like kubectl does, naming the allowed ones. */
function rejectUnknownFlags(defined: ArgsDef, args: ParsedArgs<ArgsDef>): void {
  const known = new Set<string>(["_", "help", "h"]);
  for (const [name, def] of Object.entries(defined)) {
    known.add(name);
    known.add(name.replace(/([A-Z])/g, "-$1").toLowerCase());
    known.add(name.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase()));
    const alias = "alias" in def ? def.alias : undefined;
    for (const a of Array.isArray(alias) ? alias : alias ? [alias] : []) known.add(a);
  }
  const unknown = Object.keys(args).filter((k) => !known.has(k));
  if (unknown.length > 0) {
    const flags = Object.keys(defined)
      .filter((k) => defined[k]?.type !== "positional")
      .map((k) => `--${k}`);
    throw new SvcError(
      "usage",
      `unknown flag --${unknown[0]} (allowed: ${flags.join(", ") || "none"}; see --help)`,
    );
  }
}

/** Every value of a repeatable flag (`-H a -H b`, `--header=a`), which citty would reduce to the last. */
export function repeated(rawArgs: string[], names: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < rawArgs.length; i++) {
    const a = rawArgs[i] as string;
    if (a === "--") break;
    const eq = names.find((n) => a.startsWith(`${n}=`));
    if (eq) out.push(a.slice(eq.length + 1));
    else if (names.includes(a)) {
      // A flag at the end with nothing after it is an error, never a value silently dropped.
      if (i + 1 >= rawArgs.length || rawArgs[i + 1] === "--")
        throw new SvcError("usage", `${a} needs a value (see --help)`);
      out.push(rawArgs[++i] as string);
    }
  }
  return out;
}

/** Checks `-o/--output` against the formats a command prints; undefined is the default (text). */
export function checkOutput(value: string | undefined, allowed: string[]): void {
  if (value !== undefined && value !== "" && !allowed.includes(value))
    throw new SvcError(
      "usage",
      `--output: unknown format ${JSON.stringify(value)} (allowed: ${allowed.join(", ")})`,
    );
}

/** The structured output formats of svc's own commands (`-o json|yaml`). */
export const STRUCTURED = ["json", "yaml"];

/** The flag every command that prints data takes. */
export const outputArg = {
  output: { type: "string", alias: "o", description: "Output format: json or yaml (default: text)" },
} as const;

/**
 * Prints `value` as `-o json` or `-o yaml` asked for (checked against STRUCTURED first); false when the
 * command's text form is wanted. yaml is loaded only when asked for.
 */
export async function printStructured(format: string | undefined, value: unknown): Promise<boolean> {
  checkOutput(format, STRUCTURED);
  if (format === "json") process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
  else if (format === "yaml") process.stdout.write((await import("yaml")).stringify(value));
  else return false;
  return true;
}

/** A flag that takes a list: comma-separated. */
export function listFlag(value: unknown): string[] {
  return typeof value === "string" && value !== ""
    ? value
        .split(",")
        .map((s) => s.trim())
        .filter(Boolean)
    : [];
}

/**
 * Wraps a command's run: its arguments are checked for unknown flags first, and any error leaves
 * through exitWith (message only, mapped exit status) instead of citty's stack-printing handler.
 */
export function action<A extends ArgsDef>(
  defined: A,
  run: (args: ParsedArgs<A>, rawArgs: string[]) => unknown | Promise<unknown>,
) {
  return async ({ args, rawArgs }: { args: ParsedArgs<A>; rawArgs: string[] }) => {
    try {
      rejectUnknownFlags(defined, args as ParsedArgs<ArgsDef>);
      await run(args, rawArgs);
    } catch (e) {
      exitWith("svc", e);
    }
  };
}
