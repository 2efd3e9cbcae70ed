/**
 * exec, attach, cp, debug and port-forward (docs/svc-guard.md, "Every way into a pod"): they run only against
 * pods of the current compartment. svc resolves what kubectl will reach — the named pod; for `TYPE/NAME`
 * every pod the object selects (kubectl picks one of them, so all must pass); the objects of `-f` files —
 * through the command's own cluster target, and refuses with the message of docs/svc-guard.md ("Every way
 * into a pod") if any of them is of another compartment or has no compartment label. Anything it cannot
 * resolve is refused. `--force` overrides for users the cluster allows to (guard.ts).
 */
import { SvcError } from "../../../lib/errors.ts";
import { flagValue } from "../../../lib/kube/grammar.ts";
import { describeObject } from "../../../lib/kube/inject.ts";
import type { KubeObject } from "../../../lib/kube/lookup.ts";
import { parseObjects, readSources } from "../../../lib/kube/manifests.ts";
import { inCompartment } from "../../../lib/kube/mls.ts";
import { isNodeRef, type PodRef, podSelector, podTargets } from "../../../lib/kube/pod-targets.ts";
import { coreTypeWord } from "../../../lib/kube/type-name.ts";
import { type Guarded, type GuardInput, refuseForeign, restWithout } from "./guard.ts";

interface FoundPod {
  name: string;
  namespace: string;
  object: KubeObject;
}

/** The words of the core group's pods: a pod named so (`pod/x`, `Pods.v1/x`) is read without discovery. */
const POD_WORDS: ReadonlySet<string> = new Set(["pod", "pods", "po"]);

/** The pod a `TYPE/NAME` word names, when its type is the core group's pods; undefined otherwise. */
function podName(ref: string): string | undefined {
  const [type = "", name, extra] = ref.split("/");
  const word = coreTypeWord(type);
  return name && extra === undefined && word !== undefined && POD_WORDS.has(word) ? name : undefined;
}

/** What a refusal says the command would have done: "Cannot <this> pod in another compartment". */
const DOING: Record<string, string> = { logs: "read the logs of" };

export async function guardPods(g: GuardInput): Promise<Guarded> {
  const { refs: named, files, nodesAllowed, selector } = podTargets(g.line);
  const fromFiles = files.length > 0 ? await filesAsRefs(g, files) : undefined;
  // debug takes named targets and files together; the files' namespace (given to kubectl) is theirs too.
  const refs = [
    ...named.map((r) => ({ ...r, ...(fromFiles?.namespace ? { namespace: fromFiles.namespace } : {}) })),
    ...(fromFiles?.refs ?? []),
  ];
  const byName = new Map<string | undefined, string[]>();
  const others = new Map<string | undefined, string[]>();
  for (const r of refs) {
    if (nodesAllowed && isNodeRef(r.ref)) continue;
    const pod = podName(r.ref);
    const into = pod ? byName : others;
    into.set(r.namespace, [...(into.get(r.namespace) ?? []), pod ?? r.ref]);
  }
  const objects: KubeObject[] = [];
  for (const [namespace, names] of byName) objects.push(...(await g.lookup.pods(names, namespace)));
  for (const [namespace, names] of others) objects.push(...g.lookup.objects(names, namespace));
  if (selector) objects.push(...g.lookup.objects(["pods", "--selector", selector]));
  const pods = objects.flatMap((o) => podsOf(g, o, nodesAllowed));
  g.targets.push(...pods.map((p) => `pod/${p.namespace}/${p.name}`));
  const command = g.line.path.join(" ");
  const doing = DOING[command];
  const pinned = g.lookup.resolvedNamespace();
  const rewritten = fromFiles
    ? { args: fromFiles.args, given: fromFiles.given }
    : pinned
      ? { args: [`--namespace=${pinned}`, ...restWithout(g)], given: ["namespace"] }
      : {};
  // logs is a read: an unlabelled pod's log passes, as the authorization webhook lets it by default.
  const forced = refuseForeign(
    g,
    pods.map((p) => p.object),
    doing ?? "execute in",
    doing ? "allow" : "deny",
  );
  return forced ? { ...rewritten, forced } : rewritten;
}

/**
 * `-f FILE`: kubectl takes the objects from the file as written (a service's selector included), so svc
 * reads the files once and hands kubectl the objects by name instead (`service/x`, in the file's
 * namespace): what svc checks and what kubectl reaches are then the same live objects.
 */
async function filesAsRefs(
  g: GuardInput,
  files: string[],
): Promise<{ refs: PodRef[]; args: string[]; given: string[]; namespace?: string }> {
  const command = g.line.path.join(" ");
  const objects = parseObjects(await readSources(files, false, () => ""));
  if (command !== "debug" && (objects.length !== 1 || g.line.positionals.length > 0))
    throw new SvcError(
      "usage",
      `${command} -f: the files must hold exactly one object, and no pod may be named`,
    );
  const namespaces = new Set(
    objects.map((o) => (o.metadata as { namespace?: string } | undefined)?.namespace),
  );
  const [namespace] = namespaces;
  const given = flagValue(g.line, "namespace");
  if (namespaces.size > 1 || (namespace && given && namespace !== given))
    throw new SvcError(
      "usage",
      `${command} -f: the objects' namespaces (${[...namespaces].join(", ")}) differ from each other or from --namespace`,
    );
  const refs = objects.map((o) => {
    const name = (o.metadata as { name?: unknown } | undefined)?.name;
    const [group, version] = String(o.apiVersion ?? "").includes("/")
      ? String(o.apiVersion).split("/")
      : ["", String(o.apiVersion ?? "")];
    if (typeof o.kind !== "string" || typeof name !== "string" || !o.kind || !name)
      throw new SvcError("usage", `${command} -f: every object needs a kind and a name`);
    return {
      ref: `${o.kind}${group ? `.${version}.${group}` : ""}/${name}`,
      ...(namespace ? { namespace } : {}),
    };
  });
  // The namespace before the names: after them could be after `--`, in the command run in the pod.
  const args = [
    ...(namespace ? [`--namespace=${namespace}`] : []),
    ...refs.map((r) => r.ref),
    ...restWithout(g, "filename"),
  ];
  return { refs, args, given: namespace ? ["namespace"] : [], ...(namespace ? { namespace } : {}) };
}

function podsOf(g: GuardInput, o: KubeObject, nodesAllowed: boolean): FoundPod[] {
  const namespace = o.metadata?.namespace ?? "";
  if (o.kind === "Pod") return [{ name: o.metadata?.name ?? "", namespace, object: o }];
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

/**
 * `proxy` serves the API on a local port with your credentials. kubectl's own filter refuses exec and
 * attach through it; svc's also refuses port-forward and the proxy subresources of pods, services and nodes
 * — the ways into a pod that svc checks elsewhere — and does not let the filter be changed.
 */
const PROXY_REJECT =
  "^/api/.*/pods/.*/(exec|attach|portforward|proxy),^/api/.*/services/.*/proxy,^/api/.*/nodes/.*/proxy";

export function guardProxy(g: GuardInput): Guarded {
  const changed = ["reject-paths", "accept-paths", "disable-filter", "reject-methods"].find((f) =>
    g.line.flags.some((u) => u.name === f),
  );
  if (changed)
    throw new SvcError(
      "compartment",
      inCompartment(
        `svc proxy keeps its filter of the ways into pods (${PROXY_REJECT}); --${changed} cannot be set through svc`,
        g.active.label,
      ),
    );
  return { args: [...restWithout(g), `--reject-paths=${PROXY_REJECT}`] };
}
