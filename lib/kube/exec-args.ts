/**
 * The target of `kubectl exec` from its arguments: the first positional before `--` that is not the value
 * of a flag. `pod/name` and `name` are pods; `deploy/x` and other `type/name` forms name their owner.
 */
const VALUE_FLAGS = new Set([
  "-c",
  "--container",
  "-n",
  "--namespace",
  "--context",
  "--kubeconfig",
  "-f",
  "--filename",
  "--pod-running-timeout",
  "--cluster",
  "--user",
  "-s",
  "--server",
  "--token",
  "--as",
  "--as-group",
  "--request-timeout",
]);

export function execTarget(args: string[]): string | undefined {
  const end = args.indexOf("--");
  const before = end >= 0 ? args.slice(0, end) : args;
  for (let i = before.indexOf("exec") + 1; i > 0 && i < before.length; i++) {
    const a = before[i] as string;
    if (a.startsWith("-")) {
      if (VALUE_FLAGS.has(a)) i++;
      continue;
    }
    return a;
  }
  return undefined;
}

/** Removes svc's own `--force` (kubectl exec has none). */
export function withoutForce(args: string[]): { args: string[]; force: boolean } {
  const end = args.indexOf("--");
  const before = end >= 0 ? args.slice(0, end) : args;
  const force = before.includes("--force") || before.includes("--force=true");
  const kept = before.filter((a) => a !== "--force" && a !== "--force=true");
  return { args: end >= 0 ? [...kept, ...args.slice(end)] : kept, force };
}
