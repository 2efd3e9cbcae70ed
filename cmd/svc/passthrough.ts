import { AuditLog, type Decision } from "../../lib/config/audit.ts";
import { loadConfig } from "../../lib/config/file.ts";
import { activeContext } from "../../lib/config/resolve.ts";
import { highlightMls, wantsColor } from "../../lib/kube/highlight.ts";
import { findKubectl, withContext } from "../../lib/kube/kubectl.ts";

/**
 * Any command svc does not own goes to the real kubectl with the compartment context added (4.5: "passed
 * through with the compartment context added"). Without a current context svc is plain kubectl. Standard
 * streams and the TTY are inherited; signals reach kubectl (from a terminal directly, as it shares our
 * process group; sent to svc alone, passed on) and its exit status is ours.
 */
export async function passThrough(args: string[], command: string | undefined): Promise<never> {
  const { config, exists } = loadConfig();
  const kubectl = findKubectl();
  // Shell completion (a TAB press) is answered apart: no guards, no audit entry.
  if (command?.startsWith("__complete"))
    return (await import("./complete.ts")).complete(args, config, kubectl);
  let full = args;
  let stdin: string | undefined;
  const audit = new AuditLog(config.auditLog);
  let record = (_decision: Decision, _exitStatus: number) => {};
  if (exists && config.currentContext) {
    const c = activeContext(config);
    record = (decision, exitStatus) =>
      audit.record({
        user: process.env.USER ?? process.env.LOGNAME ?? "",
        context: c.name,
        compartment: c.label,
        command: ["svc", ...args],
        targets: targetsOf(args),
        decision,
        exitStatus,
        readOnly: READ_ONLY.has(command ?? ""),
      });
    const target = c.target;
    let own = args;
    try {
      // Each command's own module loads only when that command runs.
      if (command === "exec") own = (await import("./exec-guard.ts")).guardExec(args, c, kubectl, target);
      else if (command === "get") own = (await import("../../lib/kube/get-args.ts")).getArgs(args, c.label);
      else if (command === "apply")
        ({ args: own, stdin } = await (await import("./apply.ts")).prepareApply(args, c, kubectl, target));
      else if (command === "delete")
        for (const w of (await import("./delete-warn.ts")).deleteWarnings(args, c.label, kubectl, target))
          process.stderr.write(`${w}\n`);
    } catch (e) {
      record("refused", 1);
      throw e;
    }
    full = withContext(own, target);
  }
  const highlight = command === "describe" && wantsColor(process.stdout.isTTY === true);
  const child = Bun.spawn([kubectl, ...full], {
    stdio: [stdin === undefined ? "inherit" : "pipe", highlight ? "pipe" : "inherit", "inherit"],
  });
  // A terminal signals kubectl itself (same process group); a signal sent to svc alone is passed on.
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(signal, () => child.kill(signal));
  if (highlight && child.stdout && typeof child.stdout !== "number")
    process.stdout.write(highlightMls(await new Response(child.stdout).text()));
  if (stdin !== undefined && child.stdin && typeof child.stdin !== "number") {
    child.stdin.write(stdin);
    await child.stdin.end();
  }
  const code = await child.exited;
  const status = child.signalCode ? 128 + (SIGNALS[child.signalCode] ?? 1) : code;
  const forced = (command === "exec" || command === "delete") && args.includes("--force");
  record(forced ? "forced" : "allowed", status);
  process.exit(status);
}

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
]);

/** The positional arguments after the command: resource types and names. */
function targetsOf(args: string[]): string[] {
  const end = args.indexOf("--");
  const before = end >= 0 ? args.slice(0, end) : args;
  return before.filter((a) => !a.startsWith("-")).slice(1);
}

const SIGNALS: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGKILL: 9, SIGTERM: 15, SIGPIPE: 13 };
