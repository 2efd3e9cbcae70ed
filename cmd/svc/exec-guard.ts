import type { ActiveContext } from "../../lib/config/resolve.ts";
import { SvcError } from "../../lib/errors.ts";
import { execTarget, withoutForce } from "../../lib/kube/exec-args.ts";
import { COMPARTMENT_LABEL } from "../../lib/kube/inject.ts";
import { type KubeTarget, withContext } from "../../lib/kube/kubectl.ts";

/**
 * `svc exec` (4.5, 7): runs only in a pod of the current compartment. A pod of another compartment (or
 * with no compartment label) is refused before anything runs. `--force` overrides for users the cluster
 * allows to (`kubectl auth can-i force compartmentoverrides.svc.dev`, a SelfSubjectAccessReview; the
 * ClusterRole is deploy/rbac/svc-compartment-override.yaml). Returns kubectl's arguments to run.
 */
export const OVERRIDE_RESOURCE = "compartmentoverrides.svc.dev";

export function guardExec(
  args: string[],
  active: ActiveContext,
  kubectl: string,
  target: KubeTarget,
): string[] {
  const { args: rest, force } = withoutForce(args);
  const name = execTarget(rest);
  if (!name) return rest;
  const ref = name.includes("/") ? name : `pod/${name}`;
  const ns = namespaceFlags(rest);
  const got = run(kubectl, withContext(["get", ref, "-o", "json", ...ns], target));
  if (got.code !== 0) throw new SvcError("kube_api", got.err.trim() || `cannot read ${ref}`);
  const obj = JSON.parse(got.out) as {
    metadata?: { labels?: Record<string, string> };
    spec?: { template?: { metadata?: { labels?: Record<string, string> } } };
  };
  const labels = ref.startsWith("pod/")
    ? obj.metadata?.labels
    : (obj.spec?.template?.metadata?.labels ?? obj.metadata?.labels);
  const compartment = labels?.[COMPARTMENT_LABEL] ?? "";
  if (compartment.toUpperCase() === active.label) return rest;
  if (!force)
    throw new SvcError(
      "usage",
      `Cannot execute in pod in another compartment (${compartment || "no compartment label"})\ncurrent compartment: ${active.label}`,
    );
  const can = run(
    kubectl,
    withContext(["auth", "can-i", "force", OVERRIDE_RESOURCE], { ...target, namespace: "" }),
  );
  if (can.out.trim() !== "yes")
    throw new SvcError(
      "usage",
      `--force refused: you may not override compartments (the cluster must allow "force" on ${OVERRIDE_RESOURCE}; see docs/svc-config.md)\ncurrent compartment: ${active.label}`,
    );
  process.stderr.write(
    `svc: warning: --force: executing in ${name} of compartment ${compartment || "(none)"} from ${active.label}\n`,
  );
  return rest;
}

function namespaceFlags(args: string[]): string[] {
  const out: string[] = [];
  args.forEach((a, i) => {
    if ((a === "-n" || a === "--namespace") && args[i + 1]) out.push(a, args[i + 1] as string);
    else if (a.startsWith("--namespace=") || (a.startsWith("-n") && a.length > 2 && !a.startsWith("--")))
      out.push(a);
  });
  return out;
}

function run(kubectl: string, args: string[]): { code: number; out: string; err: string } {
  const r = Bun.spawnSync([kubectl, ...args], { stdout: "pipe", stderr: "pipe" });
  return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
}
