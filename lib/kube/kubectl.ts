import { accessSync, constants, realpathSync } from "node:fs";
import { delimiter, join } from "node:path";
import { SvcError } from "../errors.ts";

/**
 * The real kubectl, found without finding svc itself (users `alias kubectl=svc` or link svc as
 * kubectl): SVC_KUBECTL if set, else the first `kubectl` on PATH that is not this executable.
 */
export function findKubectl(env = process.env, self = process.execPath): string {
  if (env.SVC_KUBECTL) return env.SVC_KUBECTL;
  const me = safeRealpath(self);
  for (const dir of (env.PATH ?? "").split(delimiter).filter(Boolean)) {
    const candidate = join(dir, "kubectl");
    try {
      accessSync(candidate, constants.X_OK);
    } catch {
      continue;
    }
    if (safeRealpath(candidate) !== me) return candidate;
  }
  throw new SvcError(
    "usage",
    "kubectl not found on PATH (svc runs the real kubectl for Kubernetes commands); install it or set SVC_KUBECTL",
  );
}

function safeRealpath(p: string): string {
  try {
    return realpathSync(p);
  } catch {
    return p;
  }
}

export interface KubeTarget {
  kubeContext: string;
  kubeconfig?: string;
  namespace?: string;
}

const has = (args: string[], ...flags: string[]) =>
  args.some((a) =>
    flags.some(
      (f) => a === f || a.startsWith(`${f}=`) || (f.length === 2 && a.startsWith(f) && a.length > 2),
    ),
  );

/**
 * kubectl's arguments with the compartment context added: `--context`, `--kubeconfig` and the
 * context's namespace, each only where the user did not give one (a user's flag always wins). They go
 * at the end, before any `--`.
 */
export function withContext(args: string[], t: KubeTarget): string[] {
  const end = args.indexOf("--");
  const flags = end >= 0 ? args.slice(0, end) : args;
  const extra: string[] = [];
  if (!has(flags, "--context")) extra.push(`--context=${t.kubeContext}`);
  if (t.kubeconfig && !has(flags, "--kubeconfig")) extra.push(`--kubeconfig=${t.kubeconfig}`);
  if (t.namespace && !has(flags, "-n", "--namespace", "-A", "--all-namespaces"))
    extra.push(`--namespace=${t.namespace}`);
  // After the command, not before it: kubectl refuses flags before a plugin's name.
  return end >= 0 ? [...flags, ...extra, ...args.slice(end)] : [...args, ...extra];
}
