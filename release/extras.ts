#!/usr/bin/env bun
/**
 * Writes what the release archives carry beside the binaries: shell completions for svc and svc-proxy
 * (bash, zsh, fish) and their manual pages. GoReleaser runs it as a before-hook; `make extras` too.
 *
 *   bun release/extras.ts [--out DIR] [--version V] [--date YYYY-MM-DD]
 *
 * svc's completion is kubectl's own script adapted (`svc completion`), so kubectl must be on PATH.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { SVC_DESCRIPTION, subCommands } from "../cmd/svc/commands.ts";
import { svcCompletion } from "../cmd/svc/completion.ts";
import { FLAGS } from "../cmd/svc-proxy/flags.ts";
import { findKubectl } from "../lib/kube/kubectl.ts";
import { proxyCompletion, type Shell } from "./completion-svc-proxy.ts";
import { sourceDateEpoch } from "./epoch.ts";
import { proxyManual, svcManual } from "./man.ts";

const SHELLS: Shell[] = ["bash", "zsh", "fish"];
/** Where each shell looks for a completion file, by the names Homebrew and distributions install. */
const FILE: Record<Shell, (program: string) => string> = {
  bash: (p) => `${p}.bash`,
  zsh: (p) => `_${p}`,
  fish: (p) => `${p}.fish`,
};

const { values } = parseArgs({
  options: {
    out: { type: "string", default: "dist/extras" },
    version: { type: "string", default: process.env.npm_package_version ?? "dev" },
    date: { type: "string", default: new Date(sourceDateEpoch() * 1000).toISOString().slice(0, 10) },
  },
});
const out = values.out as string;
mkdirSync(join(out, "completions"), { recursive: true });
mkdirSync(join(out, "man"), { recursive: true });

const kubectl = findKubectl();
for (const shell of SHELLS) {
  const r = Bun.spawnSync([kubectl, "completion", shell], { stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`kubectl completion ${shell} failed: ${r.stderr.toString().trim()}`);
  writeFileSync(join(out, "completions", FILE[shell]("svc")), svcCompletion(shell, r.stdout.toString()));
  writeFileSync(join(out, "completions", FILE[shell]("svc-proxy")), proxyCompletion(shell, FLAGS));
}

const version = values.version as string;
const date = values.date as string;
const root = { meta: { name: "svc", description: SVC_DESCRIPTION }, subCommands };
writeFileSync(join(out, "man", "svc.1"), await svcManual(root, version, date));
writeFileSync(join(out, "man", "svc-proxy.1"), proxyManual(FLAGS, version, date));
console.log(`wrote completions and manual pages to ${out}`);
