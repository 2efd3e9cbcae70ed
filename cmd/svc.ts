#!/usr/bin/env bun
import { exitWith } from "./exit.ts";

/**
 * svc: the compartment-aware kubectl wrapper. Commands load lazily so start-up stays fast; a command svc
 * does not own goes to kubectl with the compartment context (cmd/svc/passthrough.ts).
 */
const subCommands = {
  version: () => import("./svc/version.ts").then((m) => m.default),
  dev: () => import("./svc/dev.ts").then((m) => m.default),
  curl: () => import("./svc/curl.ts").then((m) => m.default),
  context: () => import("./svc/context.ts").then((m) => m.default),
  identity: () => import("./svc/identity.ts").then((m) => m.default),
  completion: () => import("./svc/completion.ts").then((m) => m.default),
  notary: () => import("./svc/notary.ts").then((m) => m.default),
};
process.on("unhandledRejection", (e) => exitWith("svc", e));
const args = process.argv.slice(2);
const command = args.find((a) => !a.startsWith("-"));
// kubectl's commands skip citty entirely: what svc adds to kubectl's time is kept small.
if (command !== undefined && !Object.hasOwn(subCommands, command)) {
  const { passThrough } = await import("./svc/passthrough.ts");
  await passThrough(args).catch((e) => exitWith("svc", e));
}
const { defineCommand, runMain } = await import("citty");
const main = defineCommand({
  meta: { name: "svc", description: "Compartment-aware kubectl for multi-level-security clusters" },
  subCommands,
});

await runMain(main).catch((e) => exitWith("svc", e));
