#!/usr/bin/env bun
/**
 * Writes lib/kube/kubectl-commands.json from the installed kubectl's own help: every command and
 * subcommand (with aliases) and every flag, global and local, with its shape. Run it when the supported
 * kubectl version changes:   bun tests/support/kubectl-grammar-gen.ts [kubectl]
 *
 * A flag's shape decides how the next word is read (pflag's rules):
 *   "b"  boolean: never takes the next word (`--stdin`, `-i`; `--stdin=false` sets it);
 *   "v"  takes a value: `--container=x`, `--container x`, `-cx`, `-c x`, `-c=x`;
 *   "o"  optional value (pflag's NoOptDefVal): `--dry-run` alone, or `--dry-run=server`, never the next word.
 * Help text shows booleans with an unquoted true/false default. The optional-value flags are not visible
 * in help; kubectl v1.32's source sets NoOptDefVal on exactly these string flags (and on config's
 * boolean-like ones, which help already shows as booleans).
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";

const OPTIONAL_VALUE = new Set(["dry-run", "validate", "cascade"]);
/**
 * Hidden flags kubectl v1.32 still accepts but does not show in help: the deprecated boolean --record, on
 * these commands (found by running each command with --record against an unreachable server).
 */
const RECORD = new Set([
  "annotate",
  "apply",
  "apply edit-last-applied",
  "autoscale",
  "create",
  "edit",
  "expose",
  "label",
  "patch",
  "run",
  "scale",
  "set image",
  "set resources",
  "set selector",
  "set serviceaccount",
]);
const kubectl = process.argv[2] ?? "kubectl";

type Shape = "b" | "v" | "o";
export interface CommandSpec {
  aliases?: string[];
  /** Local flags by long name: [shape, shorthand?]. */
  flags: Record<string, [Shape] | [Shape, string]>;
  sub?: Record<string, CommandSpec>;
}

function help(path: string[]): string {
  const r = Bun.spawnSync([kubectl, ...path, "--help"], { stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`${path.join(" ")} --help: ${r.stderr.toString()}`);
  return r.stdout.toString();
}

function section(text: string, heading: RegExp): string[] {
  const lines = text.split("\n");
  const out: string[] = [];
  let inside = false;
  for (const l of lines) {
    if (heading.test(l)) {
      inside = true;
      continue;
    }
    if (inside && /^\S/.test(l)) inside = heading.test(l);
    if (inside) out.push(l);
  }
  return out;
}

function flagsOf(text: string): CommandSpec["flags"] {
  const flags: CommandSpec["flags"] = {};
  for (const l of section(text, /^(Options|The following options can be passed to any command):$/)) {
    const m = /^ {4}(?:-(\w), )?--([\w-]+)=(.*):$/.exec(l);
    if (!m) continue;
    const [, short, name, def] = m as unknown as [string, string | undefined, string, string];
    const shape: Shape = OPTIONAL_VALUE.has(name) ? "o" : def === "true" || def === "false" ? "b" : "v";
    flags[name] = short ? [shape, short] : [shape];
  }
  return flags;
}

function commandsOf(text: string, root: boolean): string[] {
  const heading = root ? /^[A-Z][\w ()]*Commands[\w ()]*:$/ : /^Available Commands:$/;
  return section(text, heading)
    .map((l) => /^ {2}([a-z][\w-]*)\s/.exec(l)?.[1])
    .filter((n): n is string => n !== undefined);
}

function walk(path: string[]): CommandSpec {
  const text = help(path);
  const spec: CommandSpec = { flags: path.length === 0 ? {} : flagsOf(text) };
  if (RECORD.has(path.join(" "))) spec.flags.record = ["b"];
  const lines = text.split("\n");
  const aliases = lines[lines.indexOf("Aliases:") + 1]
    ?.split(",")
    .map((s) => s.trim())
    .filter((a) => a && a !== path.at(-1));
  if (lines.includes("Aliases:") && aliases?.length) spec.aliases = aliases;
  const subs = commandsOf(text, path.length === 0);
  if (subs.length) {
    spec.sub = {};
    for (const s of subs.sort()) spec.sub[s] = walk([...path, s]);
  }
  return spec;
}

const version = (
  JSON.parse(
    Bun.spawnSync([kubectl, "version", "--client", "-o", "json"], { stdout: "pipe" }).stdout.toString(),
  ) as { clientVersion: { gitVersion: string } }
).clientVersion.gitVersion;
const root = walk([]);
// Commands kubectl runs but does not list in its help.
for (const hidden of ["alpha", "options", "help"]) root.sub = { ...root.sub, [hidden]: { flags: {} } };
const table = {
  kubectl: version,
  globals: flagsOf(Bun.spawnSync([kubectl, "options"]).stdout.toString()),
  commands: root.sub,
};
const out = join(import.meta.dir, "..", "..", "lib", "kube", "kubectl-commands.json");
writeFileSync(out, `${JSON.stringify(table)}\n`);
// In the repository's format, so that a regenerated table differs only where kubectl does.
Bun.spawnSync([join(import.meta.dir, "..", "..", "node_modules", ".bin", "biome"), "format", "--write", out]);
console.log(`wrote ${out}: kubectl ${version}, ${Object.keys(table.commands ?? {}).length} commands`);
