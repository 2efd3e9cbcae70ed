/**
 * Objects whose compartment must agree with the objects they name (docs/admission.md), decided for every
 * requester, the controllers included, since they act on a user's behalf:
 * - references: a pod, or a pod template of any workload, may name a Secret, ConfigMap, ServiceAccount or
 *   PersistentVolumeClaim only of its own compartment, or an unmarked one; an unmarked pod naming a marked
 *   object follows `unlabeled_pods`. A service-account token Secret may only be for a service account of
 *   its own compartment. A referent that does not exist yet passes (the pods a controller creates from the
 *   template are decided again then).
 * - owners: an owner reference added to an object (a controller adopting it, or one written by hand) must
 *   name an owner of the object's compartment; both unmarked is the same compartment. Compared is what the
 *   pods will carry: a workload's pod template, else the object's own marks. An owner of a kind the
 *   webhook cannot read is refused.
 * - names (object-references.ts), for requesters outside the control plane: the workload an HPA scales,
 *   an Ingress's backends, the volume a claim binds by name and its source, what an Event is about, the
 *   priority class of a pod or template, the service accounts a RoleBinding grants its role to. Each must
 *   exist, be of a kind the webhook can read, and be of the object's compartment (a priority class that
 *   never preempts, or the global default, may be anyone's). A pod spec may gain no storage reached by an
 *   address of its own (NFS, iSCSI …), and a claim template's selector must pin its compartment.
 * - a new service account: the RoleBindings that already name it (RBAC binds by name, so a deleted
 *   account's bindings wait for whoever creates the name again) must be of its compartment.
 * The override permission passes all of these.
 */
import { compartmentOf, type MarkedAs, sameCompartment } from "../../lib/kube/clearance.ts";
import { CACHED_KINDS } from "../../lib/kube/marks-cache.ts";
import { COMPARTMENT_LABEL, type Marks, marksOfMeta, REFUSAL } from "../../lib/kube/mls.ts";
import {
  claimTemplates,
  groupOf,
  NAMING_RESOURCES,
  type NamedRef,
  namesOf,
} from "../../lib/kube/object-references.ts";
import { podSpecOf, type Reference, referencesOf, unmarkedStorage } from "../../lib/kube/pod-references.ts";
import type { IdentityDeps } from "./identity.ts";
import {
  type AdmissionRequest,
  clip,
  describe,
  isControlPlane,
  refuse,
  shown,
  str,
  type UnlabeledRule,
  type UserInfo,
  unlessOverridden,
  type Verdict,
} from "./request.ts";

export interface ObjectRef {
  group: string;
  kind: string;
  name: string;
  /** When set, only the object of this UID counts (an owner). */
  uid?: string;
  /** Another namespace than the review's. */
  namespace?: string;
}

export type Lookup =
  | { found: "no" }
  | { found: "unknown-kind" }
  | { found: "yes"; marks: Marks; what: string; harmless?: string };

export interface ConsistencyDeps extends IdentityDeps {
  /** Any object by group, kind and name (cluster-scoped ones too), as far as the webhook can read it. */
  lookup(ref: ObjectRef, namespace: string): Promise<Lookup>;
  /** The RoleBindings, in any namespace, that grant their role to this service account. */
  bindingsOf(namespace: string, account: string): Promise<{ marks: Marks; what: string }[]>;
  canOverride(user: UserInfo, namespace: string): Promise<boolean>;
  unlabeled: UnlabeledRule;
}

/**
 * The kinds (resources) whose references are reviewed here, on CREATE and UPDATE, named in the metrics;
 * the owners of every other kind are reviewed too (counted as "objects").
 */
export const CONSISTENCY_KINDS = new Set([
  "pods",
  "deployments",
  "replicasets",
  "statefulsets",
  "daemonsets",
  "jobs",
  "cronjobs",
  "replicationcontrollers",
  "podtemplates",
  "controllerrevisions",
  "secrets",
  ...[...NAMING_RESOURCES].map((r) => r.split("/")[1] as string),
]);

/** Bounds on what one review costs: references decided, owners and names looked up. */
const MAX_REFERENCES = 256;
const MAX_OWNERS = 8;
const MAX_NAMED = 32;
const SA_TOKEN_TYPE = "kubernetes.io/service-account-token";
const SA_NAME_ANNOTATION = "kubernetes.io/service-account.name";

const named = (m: MarkedAs) => (m.kind === "marked" ? m.shown : "no compartment");

export async function decideConsistency(req: AdmissionRequest, deps: ConsistencyDeps): Promise<Verdict> {
  const resource = str(req.resource?.resource) ?? "";
  const namespace = str(req.namespace);
  const object = req.object as { metadata?: unknown } | null | undefined;
  if (
    !namespace ||
    !object ||
    typeof object !== "object" ||
    (req.operation !== "CREATE" && req.operation !== "UPDATE")
  )
    return refuse(
      `svc admission: cannot read the ${shown(req.operation)} of ${shown(resource)}: it needs a namespace and the object`,
    );
  const self = describe(req, object);
  const podSpec = podSpecOf(resource, object);
  const own = compartmentOf(marksOfMeta(podSpec?.meta ?? object.metadata));
  const problems: string[] = [];
  let unlabeledOnly = true;
  const problem = (text: string, unlabeled = false) => {
    problems.push(text);
    unlabeledOnly &&= unlabeled;
  };
  // Marks it cannot read: nothing to compare with; refused, unless the requester holds the override.
  if (own.kind === "unreadable") return overridden(`${self} ${REFUSAL.unreadable}: ${own.why}`);

  const references: Reference[] = podSpec ? referencesOf(podSpec.spec) : [];
  const meta = object.metadata as { annotations?: Record<string, unknown> } | undefined;
  if (resource === "secrets" && (object as { type?: unknown }).type === SA_TOKEN_TYPE) {
    const sa = str(meta?.annotations?.[SA_NAME_ANNOTATION]);
    if (sa) references.push({ kind: "serviceaccounts", name: sa, via: `annotation ${SA_NAME_ANNOTATION}` });
  }
  if (references.length > MAX_REFERENCES)
    return refuse(
      `svc admission: ${self} names ${references.length} Secrets, ConfigMaps, ServiceAccounts and claims; at most ${MAX_REFERENCES} are decided`,
      named(own),
    );
  const looked = await Promise.all(references.map((r) => deps.entry(r.kind, namespace, r.name)));
  for (const [i, r] of references.entries()) {
    const found = looked[i];
    if (!found) continue;
    const theirs = compartmentOf(found);
    const other = `${CACHED_KINDS[r.kind]} ${clip(namespace)}/${clip(r.name)}`;
    if (theirs.kind === "none") continue;
    if (theirs.kind === "unreadable") problem(`${other} (${r.via}) ${REFUSAL.unreadable}: ${theirs.why}`);
    else if (own.kind === "none") {
      if (deps.unlabeled === "deny")
        problem(
          `${self} has no compartment label and names ${other} of compartment ${theirs.shown} (${r.via}); this cluster refuses unlabeled pods that name marked objects`,
          true,
        );
    } else if (!sameCompartment(own.parts, theirs.parts))
      problem(`${self} (${own.shown}) names ${other} of another compartment (${theirs.shown}) (${r.via})`);
  }

  // Owners: every reference the object gains (a controller's adoption included); a controller's own
  // creations carry owners it set from its own template, and are not looked up.
  if (!(req.operation === "CREATE" && isControlPlane(req.userInfo))) {
    const before = new Set(ownersOf(req.oldObject).map((o) => o.uid));
    const gained = ownersOf(object).filter((o) => !before.has(o.uid));
    if (gained.length > MAX_OWNERS)
      return refuse(
        `svc admission: ${self} gains ${gained.length} owners; at most ${MAX_OWNERS} are decided`,
      );
    const owners = await Promise.all(
      gained.map((o) =>
        deps.lookup({ group: groupOf(o.apiVersion), kind: o.kind, name: o.name, uid: o.uid }, namespace),
      ),
    );
    for (const [i, o] of gained.entries()) {
      const found = owners[i] as Lookup;
      const owner = `${clip(o.kind)} ${clip(namespace)}/${clip(o.name)}`;
      // An owner that does not exist (or has another UID): the garbage collector removes the object.
      if (found.found === "no") continue;
      if (found.found === "unknown-kind")
        problem(
          `${self} (${named(own)}) cannot be owned by ${owner}: svc cannot tell the compartment of a ${clip(o.kind)} (${clip(o.apiVersion)})`,
        );
      else compare(found, (theirs) => `cannot be owned by ${found.what} of another compartment (${theirs})`);
    }
  }

  // What the object names for a controller to act on, when its writer is not the control plane (which
  // copies what users wrote: a claim the binder binds, a pod from a checked template, its own Events).
  if (!isControlPlane(req.userInfo)) {
    const group = str(req.resource?.group) ?? "";
    const oldPodSpec = podSpecOf(resource, req.oldObject)?.spec;
    const key = (n: NamedRef) => JSON.stringify([n.group, n.kind, n.name, n.namespace ?? namespace]);
    // An update is decided by what it names anew: what a controller set since (a bound claim's volume,
    // the default priority class) and what has gone since (a deleted source) were decided when written.
    const before = new Set(
      req.operation === "UPDATE"
        ? namesOf(group, resource, req.oldObject, oldPodSpec, namespace).map(key)
        : [],
    );
    const names = namesOf(group, resource, object, podSpec?.spec, namespace).filter(
      (n) => !before.has(key(n)),
    );
    // Storage a pod reaches by an address of its own (an NFS export, an iSCSI target) may be anyone's;
    // decided, as the names are, where the spec gains it.
    const storedStorage = new Set(unmarkedStorage(oldPodSpec).map((v) => `${v.via} ${v.type}`));
    for (const v of unmarkedStorage(podSpec?.spec).filter((v) => !storedStorage.has(`${v.via} ${v.type}`)))
      problem(
        `${self} (${named(own)}) mounts a ${clip(v.type)} volume (${v.via}): svc cannot tell whose storage it reaches; use a claim of a volume marked for its compartment`,
      );
    // A claim template's selector binds volumes for the control plane: it pins the pods' compartment.
    const label = marksOfMeta(podSpec?.meta ?? object.metadata).compartment;
    for (const t of claimTemplates(object, podSpec?.spec)) {
      const selector = (t.spec as { selector?: { matchLabels?: Record<string, unknown> } } | undefined)
        ?.selector;
      if (selector === undefined) continue;
      const pinned = selector?.matchLabels?.[COMPARTMENT_LABEL];
      if (label === undefined || pinned !== label)
        problem(
          `${self} (${named(own)}) has a claim template (${t.via}) whose selector does not pin svc.io/compartment=${clip(label ?? "<its label>")}: svc cannot tell which volumes it binds`,
        );
    }
    if (names.length > MAX_NAMED)
      return refuse(`svc admission: ${self} names ${names.length} objects; at most ${MAX_NAMED} are decided`);
    const found = await Promise.all(names.map((n) => deps.lookup(n, namespace)));
    if (resource === "serviceaccounts" && req.operation === "CREATE") {
      const account = str((object.metadata as { name?: unknown } | undefined)?.name) ?? str(req.name) ?? "";
      for (const binding of await deps.bindingsOf(namespace, account))
        compare(
          binding,
          (theirs) =>
            `would take the role that ${binding.what} of another compartment (${theirs}) grants to its name`,
        );
    }
    for (const [i, n] of names.entries()) {
      const f = found[i] as Lookup;
      const other = `${clip(n.kind)} ${n.group ? `(${clip(n.group)}) ` : ""}${clip(n.namespace ?? namespace)}/${clip(n.name)}`;
      if (f.found === "no")
        problem(
          `${self} (${named(own)}) names ${other} (${n.via}), which does not exist: svc cannot tell its compartment; create it first`,
        );
      else if (f.found === "unknown-kind")
        problem(
          `${self} (${named(own)}) names ${other} (${n.via}): svc cannot tell the compartment of a ${clip(n.kind)}`,
        );
      else if (!f.harmless)
        compare(f, (theirs) => `names ${f.what} of another compartment (${theirs}) (${n.via})`);
    }
  }

  if (problems.length === 0)
    return {
      allowed: true,
      decision: "allowed",
      message: `${self} names only objects of its compartment`,
      ...(own.kind === "marked" ? { compartment: own.shown } : {}),
    };
  const shownProblems =
    problems.slice(0, 5).join("; ") + (problems.length > 5 ? `; and ${problems.length - 5} more` : "");
  return overridden(shownProblems, unlabeledOnly ? "unlabeled" : "refused");

  /** The referent's compartment against the object's own; both unmarked is the same compartment. */
  function compare(found: { marks: Marks; what: string }, text: (theirs: string) => string) {
    const theirs = compartmentOf(found.marks);
    const same =
      (own.kind === "none" && theirs.kind === "none") ||
      (own.kind === "marked" && theirs.kind === "marked" && sameCompartment(own.parts, theirs.parts));
    if (theirs.kind === "unreadable") problem(`${found.what} ${REFUSAL.unreadable}: ${theirs.why}`);
    else if (!same) problem(`${self} (${named(own)}) ${text(named(theirs))}`);
  }

  function overridden(text: string, decision: "refused" | "unlabeled" = "refused"): Promise<Verdict> {
    const compartment = own.kind === "marked" ? { compartment: own.shown } : {};
    return unlessOverridden(
      { allowed: false, decision, message: `svc admission: ${text}`, ...compartment },
      req.userInfo ?? {},
      namespace as string,
      deps.canOverride,
    );
  }
}

/** The object's owner references, each field checked for its type; others are skipped. */
function ownersOf(object: unknown): { apiVersion: string; kind: string; name: string; uid: string }[] {
  const refs = (object as { metadata?: { ownerReferences?: unknown } } | null | undefined)?.metadata
    ?.ownerReferences;
  if (!Array.isArray(refs)) return [];
  return refs.flatMap((r) => {
    const o = r as Record<string, unknown>;
    const [apiVersion, kind, name, uid] = [str(o?.apiVersion), str(o?.kind), str(o?.name), str(o?.uid)];
    return apiVersion && kind && name && uid ? [{ apiVersion, kind, name, uid }] : [];
  });
}
