import { SvcError } from "../../../lib/errors.ts";
import { COMPARTMENT_LABEL, describeObject } from "../../../lib/kube/inject.ts";
import type { KubeObject } from "../../../lib/kube/lookup.ts";
import { isNodeRef, podSelector, podTargets } from "../../../lib/kube/pod-targets.ts";
import { type Guarded, type GuardInput, refuseUnlessOverridden } from "./guard.ts";

/**
 * exec, attach, cp, debug and port-forward (4.5, 7): they run only against pods of the current
 * compartment. svc resolves what kubectl will reach — the named pod; for `TYPE/NAME` every pod the
 * object selects (kubectl picks one of them, so all must pass); the objects of `-f` files — through the
 * command's own cluster target, and refuses with section 7's message if any of them is of another
 * compartment or has no compartment label. Anything it cannot resolve is refused. `--force` overrides
 * for users the cluster allows to (guard.ts).
 */
interface FoundPod {
  name: string;
  namespace: string;
  compartment: string;
}

/** `pod/x`, `pods/x`, `po/x`: a pod by name, which svc can read without kubectl's resource discovery. */
const POD_REF = /^(?:pods?|po)\/([^/]+)$/;

export async function guardPods(g: GuardInput): Promise<Guarded> {
  const { refs, files, nodesAllowed } = podTargets(g.line);
  const byName = new Map<string | undefined, string[]>();
  const others = new Map<string | undefined, string[]>();
  for (const r of refs) {
    if (nodesAllowed && isNodeRef(r.ref)) continue;
    const pod = POD_REF.exec(r.ref)?.[1];
    const into = pod ? byName : others;
    into.set(r.namespace, [...(into.get(r.namespace) ?? []), pod ?? r.ref]);
  }
  const objects: KubeObject[] = [];
  for (const [namespace, names] of byName) objects.push(...(await g.lookup.pods(names, namespace)));
  for (const [namespace, names] of others) objects.push(...g.lookup.objects(names, namespace));
  if (files.length > 0) objects.push(...g.lookup.objects(files.flatMap((f) => ["--filename", f])));
  const pods = objects.flatMap((o) => podsOf(g, o, nodesAllowed));
  const targets = pods.map((p) => `pod/${p.namespace}/${p.name}`);
  const foreign = pods.find((p) => p.compartment.toUpperCase() !== g.active.label);
  if (!foreign) return { targets };
  const compartment = foreign.compartment || "no compartment label";
  refuseUnlessOverridden(
    g,
    `Cannot execute in pod in another compartment (${compartment})`,
    `${g.line.path.join(" ")} into pod ${foreign.name} of compartment ${foreign.compartment || "(none)"}`,
  );
  return { targets, forced: true };
}

function podsOf(g: GuardInput, o: KubeObject, nodesAllowed: boolean): FoundPod[] {
  const namespace = o.metadata?.namespace ?? "";
  if (o.kind === "Pod")
    return [
      { name: o.metadata?.name ?? "", namespace, compartment: o.metadata?.labels?.[COMPARTMENT_LABEL] ?? "" },
    ];
  if (o.kind === "Node" && nodesAllowed) return [];
  const selector = podSelector(o);
  if (selector === undefined)
    throw new SvcError(
      "compartment",
      `svc cannot tell which pod kubectl ${g.line.path.join(" ")} will use for ${describeObject(o as Record<string, unknown>)}; name a pod instead`,
    );
  const pods = g.lookup.objects(["pods", "--selector", selector], namespace);
  if (pods.length === 0)
    throw new SvcError(
      "compartment",
      `no pod behind ${describeObject(o as Record<string, unknown>)} yet, so svc cannot tell which pod kubectl will pick; name a pod instead`,
    );
  return pods.flatMap((p) => podsOf(g, p, false));
}
