import { accessSync, constants, realpathSync, statSync } from "node:fs";
import { delimiter, join } from "node:path";
import { SvcError } from "../errors.ts";

/**
 * The real kubectl, found without finding svc itself (users `alias kubectl=svc` or link svc as
 * kubectl): SVC_KUBECTL if set, else the first `kubectl` on PATH that is not this executable.
 */
export function findKubectl(env = process.env, self = process.execPath): string {
  const me = safeRealpath(self);
  if (env.SVC_KUBECTL) {
    const given = env.SVC_KUBECTL;
    const path = given.includes("/") ? given : onPath(given, env, me);
    if (path === undefined || !isExecutable(path))
      throw new SvcError(
        "usage",
        `SVC_KUBECTL=${given}: not an executable file; point it at kubectl (a path, or a name on PATH) or unset it`,
      );
    return path;
  }
  const found = onPath("kubectl", env, me);
  if (found !== undefined) return found;
  throw new SvcError(
    "usage",
    "kubectl not found on PATH (svc runs the real kubectl for Kubernetes commands); install it or set SVC_KUBECTL",
  );
}

/** The first executable `name` on PATH whose real path is not `skip` (svc itself). */
export function onPath(name: string, env: NodeJS.ProcessEnv, skip: string): string | undefined {
  for (const dir of (env.PATH ?? "").split(delimiter).filter(Boolean)) {
    const candidate = join(dir, name);
    if (isExecutable(candidate) && safeRealpath(candidate) !== skip) return candidate;
  }
  return undefined;
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
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

/** The global flags a plugin's line names, read from its words (kubectl does not parse a plugin's flags). */
function givenInWords(args: string[]): Set<string> {
  const end = args.indexOf("--");
  const flags = end >= 0 ? args.slice(0, end) : args;
  const given = new Set<string>();
  if (has(flags, "--context")) given.add("context");
  if (has(flags, "--kubeconfig")) given.add("kubeconfig");
  if (has(flags, "-n", "--namespace")) given.add("namespace");
  if (has(flags, "-A", "--all-namespaces")) given.add("all-namespaces");
  return given;
}

/**
 * kubectl's arguments with the compartment context added: `--context`, `--kubeconfig` and the
 * context's namespace, each only where the user did not give one (`given`: the flags the user's line
 * set, as kubectl reads it; a user's flag always wins). They go at the end, before any `--`.
 */
export function withContext(args: string[], t: KubeTarget, given = givenInWords(args)): string[] {
  const end = args.indexOf("--");
  const extra = contextFlags(t, given);
  // After the command, not before it: kubectl refuses flags before a plugin's name.
  return end >= 0 ? [...args.slice(0, end), ...extra, ...args.slice(end)] : [...args, ...extra];
}

/** The compartment context's flags the user did not give. */
export function contextFlags(t: KubeTarget, given: Set<string>): string[] {
  const extra: string[] = [];
  if (!given.has("context")) extra.push(`--context=${t.kubeContext}`);
  if (t.kubeconfig && !given.has("kubeconfig")) extra.push(`--kubeconfig=${t.kubeconfig}`);
  if (t.namespace && !given.has("namespace") && !given.has("all-namespaces"))
    extra.push(`--namespace=${t.namespace}`);
  return extra;
}
