/**
 * Requests that act on one existing object of a compartment, decided by the requester's clearances
 * (docs/admission.md): into a pod (exec, attach, port-forward, the pod proxy, kubectl debug), onto a pod
 * (a binding, an eviction), through a Service (the service proxy), a workload's scale, and a service
 * account's token. The target's marks are compared with the clearances the requester speaks for
 * (identity.ts, lib/kube/clearance.ts); a token bound to a pod needs clearance for that pod too, as its
 * holder speaks for the pod. Anything the webhook cannot tell — a request it was not written for, a
 * target it cannot find, marks it cannot read — is refused with the reason. Each refusal passes when
 * the requester holds the override permission.
 */
import { clearancesOf, describeClearances, judgeMarks } from "../../lib/kube/clearance.ts";
import { get } from "../../lib/kube/fields.ts";
import { type Marks, marksOfMeta, REFUSAL } from "../../lib/kube/mls.ts";
import { type IdentityDeps, speaksFor } from "./identity.ts";
import {
  type AdmissionRequest,
  clip,
  type Decision,
  refuse,
  shown,
  str,
  type UnlabeledRule,
  type UserInfo,
  unlessOverridden,
  type Verdict,
} from "./request.ts";

export interface AccessDeps extends IdentityDeps {
  /** The marks of the target (a workload: its own and its pod template's); null when there is none. */
  targetMarks(kind: TargetKind, namespace: string, name: string): Promise<Marks[] | null>;
  /** Whether the requester holds `force` on compartmentoverrides.svc.dev in the namespace. */
  canOverride(user: UserInfo, namespace: string): Promise<boolean>;
  unlabeled: UnlabeledRule;
}

export type TargetKind =
  | "pods"
  | "secrets"
  | "configmaps"
  | "serviceaccounts"
  | "services"
  | "deployments"
  | "replicasets"
  | "statefulsets"
  | "replicationcontrollers";

interface Action {
  group: string;
  resource: string;
  operation: string;
  target: TargetKind;
  /** "Cannot <text> <what> in another compartment". */
  text: string;
  what: string;
}

const pod = (operation: string, text: string): Omit<Action, "resource"> => ({
  group: "",
  operation,
  target: "pods",
  text,
  what: "pod",
});
const scale = (group: string, resource: TargetKind, what: string): Action => ({
  group,
  resource,
  operation: "UPDATE",
  target: resource,
  text: "scale",
  what,
});

/** By "resource/subresource". */
const ACTIONS: Record<string, Action> = {
  "pods/exec": { ...pod("CONNECT", "execute in"), resource: "pods" },
  "pods/attach": { ...pod("CONNECT", "attach to"), resource: "pods" },
  "pods/portforward": { ...pod("CONNECT", "forward ports to"), resource: "pods" },
  "pods/proxy": { ...pod("CONNECT", "proxy to"), resource: "pods" },
  "pods/ephemeralcontainers": { ...pod("UPDATE", "add a debug container to"), resource: "pods" },
  "pods/binding": { ...pod("CREATE", "bind"), resource: "pods" },
  // POST /namespaces/<ns>/bindings: the binding's name is its pod's.
  "bindings/": { ...pod("CREATE", "bind"), resource: "bindings" },
  "pods/eviction": { ...pod("CREATE", "evict"), resource: "pods" },
  "serviceaccounts/token": {
    group: "",
    resource: "serviceaccounts",
    operation: "CREATE",
    target: "serviceaccounts",
    text: "request a token for",
    what: "service account",
  },
  // The service proxy reaches the pods the Service selects; a marked Service selects only its own
  // compartment's (the policy pins its selector), and nobody but the control plane writes endpoints.
  "services/proxy": {
    group: "",
    resource: "services",
    operation: "CONNECT",
    target: "services",
    text: "proxy to",
    what: "service",
  },
  "deployments/scale": scale("apps", "deployments", "Deployment"),
  "replicasets/scale": scale("apps", "replicasets", "ReplicaSet"),
  "statefulsets/scale": scale("apps", "statefulsets", "StatefulSet"),
  "replicationcontrollers/scale": scale("", "replicationcontrollers", "ReplicationController"),
};

/** The "resource/subresource" keys decided here (metric labels). */
export const ACCESS_DECIDED = new Set(Object.keys(ACTIONS));

export const accessKey = (req: AdmissionRequest): string =>
  `${str(req.resource?.resource) ?? ""}/${str(req.subResource) ?? ""}`;

export async function decideAccess(req: AdmissionRequest, deps: AccessDeps): Promise<Verdict> {
  const key = accessKey(req);
  const action = Object.hasOwn(ACTIONS, key) ? ACTIONS[key] : undefined;
  const namespace = str(req.namespace);
  if (
    !action ||
    req.resource?.group !== action.group ||
    req.operation !== action.operation ||
    !namespace ||
    !str(req.name)
  ) {
    // Decided by default: what the webhook was not written for reaches something it cannot tell.
    const what = `${shown(req.resource?.resource)}/${shown(req.subResource)} ${shown(req.operation)}`;
    const because = `svc admission: ${what} is refused: svc decides exec, attach, port-forward, proxy, debug, bindings, evictions, scale and tokens, and cannot tell whose objects anything else reaches (the override needs force on compartmentoverrides.svc.dev)`;
    return namespace
      ? unlessOverridden(refuse(because), req.userInfo ?? {}, namespace, deps.canOverride)
      : refuse(because);
  }
  // A proxy's name is `name`, `name:port` or `scheme:name:port` (as the API server splits it).
  const name = key.endsWith("/proxy") ? proxied(req.name as string) : (req.name as string);
  if (!name)
    return refuse(`svc admission: cannot read the ${action.what} in the proxy request ${shown(req.name)}`);
  const target = `${action.what} ${clip(namespace)}/${clip(name)}`;
  // For an update of ephemeral containers the API server sends the stored pod as oldObject.
  const stored = (req.oldObject as { metadata?: unknown } | null | undefined)?.metadata;
  const marks =
    key === "pods/ephemeralcontainers" && stored
      ? [marksOfMeta(stored)]
      : await deps.targetMarks(action.target, namespace, name);
  if (key === "serviceaccounts/token" && marks !== null) {
    const bound = await boundPod(req, namespace, target, deps);
    if (typeof bound === "string")
      return unlessOverridden(refuse(bound), req.userInfo ?? {}, namespace, deps.canOverride);
    if (bound) {
      const boundTo = { text: `request a token of ${target} bound to`, what: "pod" };
      return judge(
        [...marks, bound.marks],
        req.userInfo ?? {},
        namespace,
        `pod ${bound.what}`,
        boundTo,
        deps,
      );
    }
  }
  return judge(marks, req.userInfo ?? {}, namespace, target, action, deps);
}

/**
 * The clearance rule on one target's marks (null: no such target), shared by the admission reviews here
 * and the authorization webhook's reads (authorize.ts): unreadable marks and a missing target are refused,
 * unlabeled targets follow `deps.unlabeled`, marked ones need every part of the requester's clearances;
 * each refusal passes when the requester may override.
 */
export async function judge(
  marks: Marks[] | null,
  user: UserInfo,
  namespace: string,
  target: string,
  action: { text: string; what: string },
  deps: Omit<AccessDeps, "targetMarks">,
): Promise<Verdict> {
  const override = (because: string, decision: Decision, compartment?: string): Promise<Verdict> =>
    unlessOverridden(
      { allowed: false, decision, message: because, ...(compartment ? { compartment } : {}) },
      user,
      namespace,
      deps.canOverride,
    );

  if (marks === null) return override(`svc admission: ${target} not found`, "refused");
  const spoken = await speaksFor(user, deps);
  const clearances = clearancesOf(spoken.groups);
  const j = judgeMarks(clearances, marks);
  if (j.kind === "unreadable")
    return override(`svc admission: ${target} ${REFUSAL.unreadable}: ${j.why}`, "refused");
  if (j.kind === "unlabeled") {
    if (deps.unlabeled === "allow")
      return { allowed: true, decision: "unlabeled", message: `${target} has no compartment label` };
    return override(
      `Cannot ${action.text} ${action.what} ${REFUSAL.unlabeled} (${target} has no svc.io/compartment label; this cluster refuses unlabeled ${action.what === "pod" ? "pods" : "objects"})`,
      "unlabeled",
    );
  }
  const compartment = clip(j.shown);
  if (j.kind === "cleared")
    return { allowed: true, decision: "allowed", message: `cleared for ${compartment}`, compartment };
  return override(
    `Cannot ${action.text} ${action.what} ${REFUSAL.foreign} (${compartment}); you are cleared for ${describeClearances(clearances)}${spoken.because === "groups" ? "" : ` (${spoken.because})`} (missing: ${j.missing.join(", ")})`,
    "refused",
    compartment,
  );
}

/**
 * What a token request binds its token to, decided by default: a pod, whose compartment the token then
 * speaks for (its marks, or a refusal when that pod of that UID does not exist); nothing, a Secret or a
 * Node, for which the token carries no pod and speaks for the account (undefined); anything else is a
 * refusal, as svc cannot tell what such a token speaks for (the API server refuses other kinds today).
 */
async function boundPod(req: AdmissionRequest, namespace: string, target: string, deps: AccessDeps) {
  const ref = get(req.object, "spec", "boundObjectRef");
  const kind = get(ref, "kind");
  if (ref === undefined || ref === null || kind === "Secret" || kind === "Node") return undefined;
  if (kind !== "Pod")
    return `svc admission: a token for ${target} bound to ${shown(kind)}: svc cannot tell which compartment it would speak for (a token may be bound to a Pod, a Secret or a Node)`;
  const name = str(get(ref, "name"));
  const uid = get(ref, "uid");
  const pod = name ? await deps.entry("pods", namespace, name) : null;
  if (pod === null || (uid !== undefined && pod.uid !== uid))
    return `svc admission: the pod a token for ${target} would be bound to does not exist (or has another UID)`;
  return { marks: pod, what: `${clip(namespace)}/${clip(name)}` };
}

function proxied(segment: string): string | undefined {
  const parts = segment.split(":");
  if (parts.length === 1 || parts.length === 2) return parts[0] || undefined;
  // An empty scheme is the API server's default (http).
  if (parts.length === 3 && ["", "http", "https"].includes(parts[0] as string)) return parts[1] || undefined;
  return undefined;
}
