import { loadConfig } from "../../lib/config/file.ts";
import { activeContext } from "../../lib/config/resolve.ts";
import { getArgs } from "../../lib/kube/get-args.ts";
import { highlightMls, wantsColor } from "../../lib/kube/highlight.ts";
import { findKubectl, withContext } from "../../lib/kube/kubectl.ts";
import { prepareApply } from "./apply.ts";
import { deleteWarnings } from "./delete-warn.ts";
import { guardExec } from "./exec-guard.ts";

/**
 * Any command svc does not own goes to the real kubectl with the compartment context added (4.5: "passed
 * through with the compartment context added"). Without a current context svc is plain kubectl. Standard
 * streams and the TTY are inherited; signals reach kubectl (it shares our process group) and its exit
 * status is ours.
 */
export async function passThrough(args: string[]): Promise<never> {
  const { config, exists } = loadConfig();
  const kubectl = findKubectl();
  let full = args;
  let stdin: string | undefined;
  if (exists && config.currentContext) {
    const c = activeContext(config);
    const target = {
      kubeContext: c.kubeContext,
      ...(process.env.KUBECONFIG || config.kubeconfig ? { kubeconfig: c.kubeconfig } : {}),
      ...(c.namespace ? { namespace: c.namespace } : {}),
    };
    const command = args.find((a) => !a.startsWith("-"));
    let own = args;
    if (command === "exec") own = guardExec(args, c, kubectl, target);
    else if (command === "get") own = getArgs(args, c.label);
    else if (command === "apply") ({ args: own, stdin } = await prepareApply(args, c, kubectl, target));
    else if (command === "delete")
      for (const w of deleteWarnings(args, c.label, kubectl, target)) process.stderr.write(`${w}\n`);
    full = withContext(own, target);
  }
  const highlight =
    args.find((a) => !a.startsWith("-")) === "describe" && wantsColor(process.stdout.isTTY === true);
  const child = Bun.spawn([kubectl, ...full], {
    stdio: [stdin === undefined ? "inherit" : "pipe", highlight ? "pipe" : "inherit", "inherit"],
  });
  if (highlight && child.stdout && typeof child.stdout !== "number")
    process.stdout.write(highlightMls(await new Response(child.stdout).text()));
  if (stdin !== undefined && child.stdin && typeof child.stdin !== "number") {
    child.stdin.write(stdin);
    await child.stdin.end();
  }
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(signal, () => {});
  const code = await child.exited;
  process.exit(child.signalCode ? 128 + (SIGNALS[child.signalCode] ?? 1) : code);
}

const SIGNALS: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGKILL: 9, SIGTERM: 15, SIGPIPE: 13 };
