import type { CommandDef } from "citty";
import { activeContext } from "../../lib/config/resolve.ts";
import type { SvcConfig } from "../../lib/config/schema.ts";
import { withContext } from "../../lib/kube/kubectl.ts";
import { isOwnCommand, subCommands } from "./commands.ts";
import { readLine, svcFlagHelp } from "./line.ts";

/**
 * `svc __complete <words…> <partial>`, what the scripts of `svc completion` ask: svc's own commands and
 * their subcommands (read from their definitions), context names after `context use|delete`, and
 * everything else from kubectl's dynamic completion run in the compartment context (its flags first:
 * the partial word must stay last). Prints cobra's format: candidates, then the `:<directive>` line.
 */
export async function complete(args: string[], config: SvcConfig, kubectl: string): Promise<never> {
  const words = args.slice(1);
  const [first, second] = words;
  if (words.length > 1 && isOwnCommand(first)) {
    const def = await subCommands[first]();
    let candidates = Object.keys((def as CommandDef).subCommands ?? {});
    if (words.length === 3)
      candidates =
        first === "context" && /^(use|delete)$/.test(second ?? "") ? Object.keys(config.contexts) : [];
    else if (words.length > 3) candidates = [];
    return print(
      candidates.filter((c) => c.startsWith(words.at(-1) ?? "")),
      ":4",
    );
  }
  const target = config.currentContext ? activeContext(config).target : undefined;
  const r = Bun.spawnSync([kubectl, ...(target ? withContext([], target) : []), ...args], {
    stdout: "pipe",
    stderr: "inherit",
  });
  const lines = r.stdout.toString().split("\n");
  const at = lines.findIndex((l) => l.startsWith(":"));
  const theirs = lines.slice(0, at >= 0 ? at : lines.length).filter(Boolean);
  const directive = at >= 0 ? (lines[at] as string) : ":4";
  // A flag being typed: svc's own flags on this command too.
  const partial = words.at(-1) ?? "";
  if (words.length > 1 && partial.startsWith("-")) {
    const added = svcFlagHelp(readLine(words.slice(0, -1)))
      .filter(([flag]) => flag.startsWith(partial))
      .map(([flag, what]) => `${flag}\t${what}`);
    return print([...theirs, ...added], directive);
  }
  if (words.length !== 1) return print(theirs, directive);
  // The first word: svc's commands (they replace kubectl's of the same name) and kubectl's.
  const own: string[] = [];
  for (const [name, load] of Object.entries(subCommands)) {
    if (!name.startsWith(first ?? "")) continue;
    const meta = (await load()).meta as { description?: string } | undefined;
    own.push(`${name}\t${meta?.description ?? ""}`);
  }
  const mine = new Set(own.map((c) => c.split("\t")[0]));
  return print([...own, ...theirs.filter((c) => !mine.has(c.split("\t")[0]))], directive);
}

function print(candidates: string[], directive: string): never {
  process.stdout.write(`${candidates.map((c) => `${c}\n`).join("")}${directive}\n`);
  process.exit(0);
}
