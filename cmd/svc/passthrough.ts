/**
 * Any command svc does not own goes to the real kubectl with the compartment context added
 * (docs/svc-config.md, "kubectl commands"). Without a current context svc is plain kubectl. The
 * commands that could cross a compartment are guarded first (docs/svc-guard.md); each guard module loads
 * only when its command runs. Standard streams and the TTY are inherited; signals reach kubectl (from a
 * terminal directly, as it shares our process group; sent to svc alone, passed on) and its exit status
 * is ours.
 */
import { AuditLog, auditUser, type Decision } from "../../lib/config/audit.ts";
import { readConfig } from "../../lib/config/read.ts";
import { activeContext } from "../../lib/config/resolve.ts";
import { compartmentLabel, findContext } from "../../lib/config/schema.ts";
import { isSvcError, SvcError } from "../../lib/errors.ts";
import { type CommandLine, flagSet, flagValue } from "../../lib/kube/grammar.ts";
import { highlightMls, wantsColor } from "../../lib/kube/highlight.ts";
import { findKubectl, onPath } from "../../lib/kube/kubectl.ts";
import { ACCOUNT_PREFIX } from "../../lib/kube/service-account.ts";
import { svcWarning } from "../say.ts";
import type { Guarded, GuardInput } from "./guards/guard.ts";
import { kubectlArgs, svcFlagHelp, svcFlags } from "./line.ts";

type Guard = (g: GuardInput) => Guarded | Promise<Guarded>;

const pods = () => import("./guards/pods.ts").then((m) => m.guardPods);
const manifests = () => import("./guards/manifests.ts").then((m) => m.guardManifests);
const writes = () => import("./guards/writes.ts").then((m) => m.guardMarkWrites);
const edit = () => import("./guards/edit.ts").then((m) => m.guardEdit);
const generated = () => import("./guards/generated.ts").then((m) => m.guardGenerated);

/** The guard of a command: by its whole name; every `create SUBCOMMAND` makes objects to mark. */
function guardOf(command: string, path: string[]): (() => Promise<Guard>) | undefined {
  if (Object.hasOwn(GUARDS, command)) return GUARDS[command];
  return path[0] === "create" && path.length > 1 ? generated : undefined;
}

const GUARDS: Record<string, () => Promise<Guard>> = {
  exec: pods,
  attach: pods,
  cp: pods,
  debug: pods,
  "port-forward": pods,
  logs: pods,
  apply: manifests,
  create: manifests,
  replace: manifests,
  label: writes,
  annotate: writes,
  patch: writes,
  run: writes,
  expose: generated,
  autoscale: generated,
  "create token": () => import("./guards/token.ts").then((m) => m.guardToken),
  edit,
  "apply edit-last-applied": edit,
  "apply view-last-applied": () => import("./guards/reads.ts").then((m) => m.guardLastApplied),
  delete: () => import("./guards/delete.ts").then((m) => m.guardDelete),
  proxy: () => import("./guards/pods.ts").then((m) => m.guardProxy),
  get: () => import("./guards/reads.ts").then((m) => m.guardReads),
  describe: () => import("./guards/reads.ts").then((m) => m.guardReads),
};

/** get is also rewritten (the COMPARTMENT column, the filters); its guard only checks reads of data. */
const REWRITES: Record<string, () => Promise<(line: CommandLine, current: string) => string[]>> = {
  get: () => import("../../lib/kube/get-args.ts").then((m) => m.getArgs),
};

/** Commands that change nothing in the cluster: audited at debug level. */
const READ_ONLY = new Set([
  "get",
  "describe",
  "logs",
  "top",
  "explain",
  "api-resources",
  "api-versions",
  "version",
  "auth",
  "diff",
  "events",
]);

/**
 * kubectl commands that reach no object of any compartment (local files, the kubeconfig, discovery, the
 * API's schema, help): with contexts defined and none current they still run, as plain kubectl. Every other
 * command stops there and says to choose a context.
 */
const NO_COMPARTMENT = new Set([
  "config",
  "version",
  "api-resources",
  "api-versions",
  "explain",
  "kustomize",
  "options",
  "help",
  "plugin",
]);

export async function passThrough(line: CommandLine): Promise<never> {
  const { config, exists } = await readConfig(svcWarning);
  const kubectl = findKubectl();
  // Shell completion (a TAB press) is answered apart: no guards, no audit entry.
  if (line.args[0]?.startsWith("__complete"))
    return (await import("./complete.ts")).complete(line.args, config, kubectl);
  const command = line.path.join(" ");
  let args = line.args;
  let guarded: Guarded = {};
  const targets: string[] = [];
  /** The audit log's entry for this command, in a context (none: ""). */
  const auditIn = (context: string, compartment: string) => (decision: Decision, exitStatus: number) =>
    new AuditLog(config.auditLog, svcWarning).record({
      user: auditUser(),
      context,
      compartment,
      command: ["svc", ...line.args],
      targets: targets.length > 0 ? targets : line.positionals,
      decision,
      exitStatus,
      readOnly: READ_ONLY.has(line.path[0] ?? ""),
    });
  let record = (_decision: Decision, _exitStatus: number) => {};
  const contexts = Object.keys(config.contexts);
  if (exists && !config.currentContext && contexts.length > 0) {
    if (!flagSet(line, "help") && !NO_COMPARTMENT.has(line.path[0] ?? "")) {
      auditIn("", "")("error", 1);
      throw new SvcError(
        "usage",
        `no current context: svc will not run kubectl ${command || line.args[0] || ""} outside a compartment; choose one with svc context use <name> (contexts: ${contexts.join(", ")})`,
      );
    }
  } else if (exists && config.currentContext) {
    let c: ReturnType<typeof activeContext>;
    try {
      c = activeContext(config);
    } catch (e) {
      // A switch the environment asked for and the configuration forbids is a refusal, and audited.
      const base = findContext(config, config.currentContext);
      auditIn(config.currentContext, base ? compartmentLabel(base) : "")(
        isSvcError(e, "compartment") ? "refused" : "error",
        1,
      );
      throw e;
    }
    record = auditIn(c.name, c.label);
    const help = flagSet(line, "help");
    const plugin = line.plugin || createPlugin(line);
    const guard = !help && !plugin ? guardOf(command, line.path) : undefined;
    const rewrite = Object.hasOwn(REWRITES, command) && !help ? REWRITES[command] : undefined;
    try {
      if ((guard || rewrite) && line.error !== undefined)
        throw new SvcError(
          "usage",
          `${line.error} (svc reads ${command} the way kubectl does, and runs nothing it cannot read; see svc ${command} --help)`,
        );
      if (rewrite) guarded = { args: (await rewrite())(line, c.label) };
      const impersonates = !help && !plugin && flagValue(line, "as")?.startsWith(ACCOUNT_PREFIX);
      if (guard || impersonates) {
        const input: GuardInput = {
          line,
          active: c,
          lookup: new (await import("../../lib/kube/lookup.ts")).Lookup(kubectl, c.target, line, c.label),
          targets,
          own: svcFlags(line),
        };
        const forced = impersonates && (await import("./guards/impersonation.ts")).guardImpersonation(input);
        if (guard) guarded = { ...guarded, ...(await (await guard())(input)) };
        if (forced) guarded.forced = true;
      }
    } catch (e) {
      record(isSvcError(e, "compartment") ? "refused" : "error", 1);
      throw e;
    }
    args = kubectlArgs(line, c.target, guarded, plugin);
  }
  const highlight = line.path[0] === "describe" && wantsColor(process.stdout.isTTY === true);
  const child = Bun.spawn([kubectl, ...args], {
    stdio: [guarded.stdin === undefined ? "inherit" : "pipe", highlight ? "pipe" : "inherit", "inherit"],
    ...(guarded.env ? { env: { ...process.env, ...guarded.env } } : {}),
  });
  // A terminal signals kubectl itself (same process group); a signal sent to svc alone is passed on.
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(signal, () => child.kill(signal));
  if (highlight && child.stdout && typeof child.stdout !== "number")
    process.stdout.write(highlightMls(await new Response(child.stdout).text()));
  if (guarded.stdin !== undefined && child.stdin && typeof child.stdin !== "number") {
    child.stdin.write(guarded.stdin);
    await child.stdin.end();
  }
  const code = await child.exited;
  // kubectl's help does not know svc's flags on its commands: they follow it.
  const added = flagSet(line, "help") && code === 0 ? svcFlagHelp(line) : [];
  if (added.length > 0)
    process.stdout.write(`\nsvc adds:\n${added.map(([flag, what]) => `    ${flag}: ${what}\n`).join("")}`);
  const status = child.signalCode ? 128 + (SIGNALS[child.signalCode] ?? 1) : code;
  const decision = guarded.after?.() ?? (line.error ? "error" : guarded.forced ? "forced" : "allowed");
  record(decision, status);
  process.exit(status);
}

/**
 * `kubectl create WORD …` runs the plugin kubectl-create-WORD… when create has no such subcommand and one
 * is on PATH (the longest match; only with `create` first and WORD right after it, as kubectl does). A
 * plugin is its own program: it gets the context like any other plugin.
 */
function createPlugin(line: CommandLine): boolean {
  // A subcommand of create would have been found: the path is create alone.
  if (line.args[0] !== "create" || line.path.join(" ") !== "create") return false;
  const words: string[] = [];
  for (const a of line.args.slice(1)) {
    if (a.startsWith("-")) break;
    words.push(a.replaceAll("-", "_"));
  }
  if (words.length === 0) return false;
  for (let n = words.length; n > 0; n--)
    if (onPath(`kubectl-create-${words.slice(0, n).join("-")}`, process.env, "") !== undefined) return true;
  return false;
}

const SIGNALS: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGKILL: 9, SIGTERM: 15, SIGPIPE: 13 };
