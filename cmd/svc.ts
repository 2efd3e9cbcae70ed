#!/usr/bin/env bun
import { SvcError } from "../lib/errors.ts";
import { parseCommandLine } from "../lib/kube/grammar.ts";
import { exitWith } from "./exit.ts";
import { isOwnCommand, SVC_DESCRIPTION, subCommands } from "./svc/commands.ts";
import { readLine } from "./svc/line.ts";

/**
 * svc: the compartment-aware kubectl wrapper. The command line is read the way kubectl reads it
 * (cmd/svc/line.ts), so the command is found wherever global flags stand. svc's own commands
 * (cmd/svc/commands.ts) load lazily so start-up stays fast; any other command goes to kubectl with the
 * compartment context (cmd/svc/passthrough.ts).
 */
process.on("unhandledRejection", (e) => exitWith("svc", e));
// A reader that stops early (`svc context list | head -1`) ends the output quietly, as for kubectl.
process.stdout.on("error", (e: NodeJS.ErrnoException) => {
  if (e.code === "EPIPE") process.exit(0);
});
const args = process.argv.slice(2);
if (args[0] === "__edit-guard")
  await (await import("./svc/guards/edit.ts")).editGuard(args[1] ?? "").catch((e) => exitWith("svc", e));
const line = readLine(args);
const own = line.path[0];
const kubectlVersion = own === "version" && !isSvcVersion(args, line.pathWords[0] as number);
if ((!isOwnCommand(own) && (line.path.length > 0 || line.plugin)) || kubectlVersion) {
  const { passThrough } = await import("./svc/passthrough.ts");
  await passThrough(kubectlVersion ? parseCommandLine(args) : line).catch((e) => exitWith("svc", e));
}
const at = line.pathWords[0];
if (at !== undefined && at > 0)
  exitWith(
    "svc",
    new SvcError(
      "usage",
      `svc ${own}: kubectl's flags (${args.slice(0, at).join(" ")}) go to kubectl's commands, not svc's own; see svc ${own} --help`,
    ),
  );
// Help and citty's messages are coloured only on a terminal (citty reads NO_COLOR when it loads).
if (!process.stdout.isTTY) process.env.NO_COLOR = "1";
const { defineCommand } = await import("citty");
const { runOwn } = await import("./svc/own.ts");
const main = defineCommand({
  meta: { name: "svc", description: SVC_DESCRIPTION },
  subCommands,
});
await runOwn(main, at === undefined ? args : [args[at] as string, ...args.slice(at + 1)]).catch((e) =>
  exitWith("svc", e),
);

/**
 * `svc version` is svc's own (with `-o FORMAT`); with anything else — `--client`, kubectl's global
 * flags — it is kubectl's version, so scripts that run `kubectl version --client -o json` keep working.
 */
function isSvcVersion(words: string[], at: number): boolean {
  if (at > 0) return false;
  const rest = words.slice(at + 1);
  if (rest.length === 1) return /^(-o.*|--output=.*|-h|--help)$/.test(rest[0] as string);
  return rest.length === 0 || (rest.length === 2 && /^(-o|--output)$/.test(rest[0] as string));
}
