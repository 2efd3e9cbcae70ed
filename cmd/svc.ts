#!/usr/bin/env bun
import { defineCommand, runMain } from "citty";
import { exitWith } from "./exit.ts";

/** svc: the compartment-aware kubectl wrapper. Commands load lazily so start-up stays fast. */
const main = defineCommand({
  meta: { name: "svc", description: "Compartment-aware kubectl for multi-level-security clusters" },
  subCommands: {
    version: () => import("./svc/version.ts").then((m) => m.default),
    dev: () => import("./svc/dev.ts").then((m) => m.default),
    curl: () => import("./svc/curl.ts").then((m) => m.default),
    context: () => import("./svc/context.ts").then((m) => m.default),
    notary: () => import("./svc/notary.ts").then((m) => m.default),
  },
});

process.on("unhandledRejection", (e) => exitWith("svc", e));
await runMain(main).catch((e) => exitWith("svc", e));
