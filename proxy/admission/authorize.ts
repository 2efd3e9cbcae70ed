import { type AccessDeps, judge, type TargetKind } from "./access.ts";
import { clip, isControlPlane, str, type UserInfo, type Verdict } from "./request.ts";

/**
 * The authorization webhook's decision (docs/admission.md, "Reads: the authorization webhook"): a
 * SubjectAccessReview (authorization.k8s.io/v1) of a named read — get, list or watch of one Secret,
 * ConfigMap or pod's log — is decided by the clearance rule the admission reviews use (access.ts, judge);
 * a read the requester is not cleared for is denied, and everything else gets no opinion, so that the
 * authorizers after this one (RBAC) decide. A read across compartments that the requester may override
 * also gets no opinion, and is logged as an override.
 */
export interface ResourceAttributes {
  namespace?: string;
  verb?: string;
  group?: string;
  resource?: string;
  subresource?: string;
  name?: string;
}

export interface AccessReviewSpec {
  resourceAttributes?: ResourceAttributes;
  user?: string;
  uid?: string;
  groups?: string[];
  extra?: Record<string, string[]>;
}

/** By "resource/subresource" (core group only): what is read, and the words of a refusal. */
const READS: Record<string, { target: TargetKind; text: string; what: string }> = {
  "pods/log": { target: "pods", text: "read the logs of", what: "pod" },
  "secrets/": { target: "secrets", text: "read", what: "secret" },
  "configmaps/": { target: "configmaps", text: "read", what: "config map" },
};
const VERBS = new Set(["get", "list", "watch"]);

/** The "resource/subresource" of a review, or undefined when it is not one of the guarded reads. */
export function guardedRead(spec: AccessReviewSpec | undefined): string | undefined {
  const a = spec?.resourceAttributes;
  const key = `${str(a?.resource) ?? ""}/${str(a?.subresource) ?? ""}`;
  if (!a || (str(a.group) ?? "") !== "" || !VERBS.has(str(a.verb) ?? "") || !Object.hasOwn(READS, key))
    return undefined;
  return key;
}

export type ReadVerdict = Verdict | { decision: "no_opinion"; message: string };

export async function decideRead(spec: AccessReviewSpec, deps: AccessDeps): Promise<ReadVerdict> {
  const key = guardedRead(spec);
  const a = spec.resourceAttributes;
  const namespace = str(a?.namespace);
  const name = str(a?.name);
  const user: UserInfo = {
    ...(str(spec.user) ? { username: spec.user } : {}),
    ...(str(spec.uid) ? { uid: spec.uid } : {}),
    ...(Array.isArray(spec.groups) ? { groups: spec.groups } : {}),
    ...(spec.extra && typeof spec.extra === "object" ? { extra: spec.extra } : {}),
  };
  // A list or watch of a whole namespace names no object (its table view shows no data): RBAC decides it.
  if (!key || !namespace || !name)
    return { decision: "no_opinion", message: "not a named read of a secret, config map or pod log" };
  if (isControlPlane(user)) return { decision: "no_opinion", message: "control plane" };
  const read = READS[key] as (typeof READS)[string];
  const marks = await deps.targetMarks(read.target, namespace, name);
  // The API server answers 404 (kubectl apply reads first to learn whether to create). The answer is kept
  // for the configured TTL: an object created under that name meanwhile is read without a decision.
  if (marks === null)
    return { decision: "no_opinion", message: `${read.what} ${clip(namespace)}/${clip(name)} not found` };
  return judge(marks, user, namespace, `${read.what} ${clip(namespace)}/${clip(name)}`, read, deps);
}
