#!/usr/bin/env bun
import { exitWith } from "./exit.ts";
import { isOwnCommand, subCommands } from "./svc/commands.ts";

/**
 * svc: the compartment-aware kubectl wrapper. Its own commands (cmd/svc/commands.ts) load lazily so
 * start-up stays fast; any other command goes to kubectl with the compartment context
 * (cmd/svc/passthrough.ts).
 */
process.on("unhandledRejection", (e) => exitWith("svc", e));
const args = process.argv.slice(2);
const command = args.find((a) => !a.startsWith("-"));
// kubectl's commands skip citty entirely: what svc adds to kubectl's time is kept small.
if (command !== undefined && !isOwnCommand(command)) {
  const { passThrough } = await import("./svc/passthrough.ts");
  await passThrough(args, command).catch((e) => exitWith("svc", e));
}
const { defineCommand, runMain } = await import("citty");
const main = defineCommand({
  meta: { name: "svc", description: "Compartment-aware kubectl for multi-level-security clusters" },
  subCommands,
});

await runMain(main).catch((e) => exitWith("svc", e));
