import { type ArgsDef, type CommandDef, parseArgs, renderUsage, runCommand } from "citty";
import { SvcError } from "../../lib/errors.ts";

/**
 * Runs one of svc's own commands (docs/svc-config.md, "Help and errors") with citty, with what citty's
 * runMain does not do: `--help` prints the usage of the command named, under its whole name (`svc context
 * create`), and only that; a subcommand svc does not have is an error naming the ones it has, `--help` or
 * not; a command line that lacks required arguments names every one of them in one `svc:` line, without
 * the help. Colour is only for a terminal: the caller sets NO_COLOR before citty loads otherwise.
 */
export async function runOwn(main: CommandDef, rawArgs: string[]): Promise<void> {
  const chain: CommandDef[] = [main];
  let rest = rawArgs;
  const help = (words: string[]) => words.some((w) => w === "--help" || w === "-h");
  for (;;) {
    const cmd = chain.at(-1) as CommandDef;
    const subs = (await value(cmd.subCommands)) as Record<string, CommandDef> | undefined;
    if (!subs) break;
    const at = rest.findIndex((w) => !w.startsWith("-"));
    const word = at < 0 ? undefined : (rest[at] as string);
    const name = await nameOf(chain);
    if (word === undefined) {
      if (help(rest)) return printUsage(cmd, chain);
      throw new SvcError(
        "usage",
        `a command is required after ${name} (allowed: ${Object.keys(subs).join(", ")}; see ${name} --help)`,
      );
    }
    if (!Object.hasOwn(subs, word))
      throw new SvcError(
        "usage",
        `unknown command ${JSON.stringify(word)} for ${name} (allowed: ${Object.keys(subs).join(", ")}; see ${name} --help)`,
      );
    chain.push((await value(subs[word])) as CommandDef);
    rest = rest.slice(at + 1);
  }
  const cmd = chain.at(-1) as CommandDef;
  if (help(rest)) return printUsage(cmd, chain);
  const missing = await missingArguments((await value(cmd.args)) ?? {}, rest);
  if (missing.length > 0) {
    const name = await nameOf(chain);
    throw new SvcError("usage", `missing ${missing.join(", ")} for ${name} (see ${name} --help)`);
  }
  await runCommand(main, { rawArgs });
}

const value = async <T>(v: T | (() => T | Promise<T>) | Promise<T> | undefined): Promise<T | undefined> =>
  typeof v === "function" ? await (v as () => T | Promise<T>)() : await v;

async function nameOf(chain: CommandDef[]): Promise<string> {
  const names = await Promise.all(chain.map(async (c) => (await value(c.meta))?.name ?? ""));
  return names.filter(Boolean).join(" ");
}

/** After svc's own commands in `svc --help`: the rest of the command line is kubectl's. */
const KUBECTL_NOTE = `Every other command is kubectl's, run in the current compartment context and checked by svc
(svc get pods, svc apply -f app.yaml, svc exec web-0 -- sh). svc <command> --help shows kubectl's help
for it, then the flags svc adds (get: --compartment, --current-compartment, …; --force).
`;

async function printUsage(cmd: CommandDef, chain: CommandDef[]): Promise<void> {
  const parent = chain.length > 1 ? { meta: { name: await nameOf(chain.slice(0, -1)) } } : undefined;
  process.stdout.write(`${await renderUsage(cmd, parent)}\n${chain.length === 1 ? `\n${KUBECTL_NOTE}` : ""}`);
}

/** The required arguments a command line lacks: positionals as NAME, flags as --name, in definition order. */
async function missingArguments(defined: ArgsDef, words: string[]): Promise<string[]> {
  // citty stops at the first missing one: parse with none required, then see what is absent.
  const optional = Object.fromEntries(
    Object.entries(defined).map(([k, d]) => [k, { ...d, required: false }]),
  ) as ArgsDef;
  const parsed = parseArgs(words, optional) as Record<string, unknown>;
  return Object.entries(defined).flatMap(([k, d]) => {
    const required = d.type === "positional" ? d.required !== false : d.required === true;
    if (!required || ("default" in d && d.default !== undefined)) return [];
    const given = parsed[k];
    if (given !== undefined && given !== "") return [];
    return [d.type === "positional" ? k.toUpperCase() : `--${k}`];
  });
}
