/**
 * The authorization webhook's decision (docs/admission.md, "Reads: the authorization webhook"): a
 * SubjectAccessReview (authorization.k8s.io/v1) of a named read — get, list or watch of one Secret,
 * ConfigMap or pod's log — or of the impersonation of a service account is decided by the clearance rule
 * the admission reviews use (access.ts, judge); one the requester is not cleared for is denied, and
 * everything else gets no opinion, so that the authorizers after this one (RBAC) decide. One across
 * compartments that the requester may override also gets no opinion, and is logged as an override.
 * Impersonating a service account that does not exist, or one that holds the override the requester does
 * not hold, is denied too: RoleBindings name accounts, not objects, and the override would be lent.
 *
 * One more question is answered, and granted: `get` on compartmentclearances.svc.dev, which the
 * ValidatingAdmissionPolicy asks for a service account (deploy/admission/base/policy.yaml, variables.groups):
 * the reason of an allowed answer is "svc-compartments speaks for: " and the clearance groups the requester
 * speaks for (identity.ts), space-separated; one that speaks for none is denied with why. The resource
 * exists nowhere; the answer grants nothing else.
 */
import { CLEARANCE_PERMISSION, SPEAKS_FOR } from "../../lib/kube/clearance.ts";
import { accountUsername } from "../../lib/kube/service-account.ts";
import { type AccessDeps, judge, type TargetKind } from "./access.ts";
import { speaksFor } from "./identity.ts";
import { clip, isControlPlane, str, type UserInfo, type Verdict } from "./request.ts";

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
export const IMPERSONATE = "serviceaccounts/impersonate";
const IMPERSONATION = { target: "serviceaccounts" as const, text: "impersonate", what: "service account" };
export const CLEARANCE = `${CLEARANCE_PERMISSION.group}/${CLEARANCE_PERMISSION.resource}`;

/**
 * The "resource/subresource" of a review ("serviceaccounts/impersonate" for an impersonation), or undefined
 * when it is not one the webhook decides.
 */
export function guardedRead(spec: AccessReviewSpec | undefined): string | undefined {
  const a = spec?.resourceAttributes;
  if (
    a &&
    str(a.group) === CLEARANCE_PERMISSION.group &&
    str(a.resource) === CLEARANCE_PERMISSION.resource &&
    !str(a.subresource) &&
    str(a.verb) === CLEARANCE_PERMISSION.verb
  )
    return CLEARANCE;
  if (!a || (str(a.group) ?? "") !== "") return undefined;
  const key = `${str(a.resource) ?? ""}/${str(a.subresource) ?? ""}`;
  if (str(a.verb) === "impersonate") return key === "serviceaccounts/" ? IMPERSONATE : undefined;
  if (!VERBS.has(str(a.verb) ?? "") || !Object.hasOwn(READS, key)) return undefined;
  return key;
}

/** What the API server is answered: allowed (a clearance question only), denied, or no opinion. */
export type AccessAnswer = "allow" | "deny" | "none";

export type ReadVerdict =
  | Verdict
  | { decision: "no_opinion"; message: string }
  | { decision: "speaks_for"; message: string };

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
  if (key === CLEARANCE) {
    if (isControlPlane(user)) return { decision: "no_opinion", message: "control plane" };
    const spoken = await speaksFor(user, deps);
    if (spoken.groups.length > 0)
      return { decision: "speaks_for", message: `${SPEAKS_FOR}${spoken.groups.join(" ")}` };
    return {
      allowed: false,
      decision: "refused",
      message: `svc-compartments: ${clip(spec.user)} speaks for no compartment: ${spoken.because === "groups" ? "it holds no svc: groups" : spoken.because}`,
    };
  }
  // A list or watch of a whole namespace names no object (its table view shows no data): RBAC decides it.
  if (!key || !namespace || !name)
    return {
      decision: "no_opinion",
      message: "not a named read of a secret, config map or pod log, nor an impersonation",
    };
  if (isControlPlane(user)) return { decision: "no_opinion", message: "control plane" };
  if (key === IMPERSONATE) return impersonation(user, namespace, name, deps);
  const read = READS[key] as (typeof READS)[string];
  const marks = await deps.targetMarks(read.target, namespace, name);
  // The API server answers 404 (kubectl apply reads first to learn whether to create). The answer is kept
  // for the configured TTL: an object created under that name meanwhile is read without a decision.
  if (marks === null)
    return { decision: "no_opinion", message: `${read.what} ${clip(namespace)}/${clip(name)} not found` };
  return judge(marks, user, namespace, `${read.what} ${clip(namespace)}/${clip(name)}`, read, deps);
}

async function impersonation(
  user: UserInfo,
  namespace: string,
  name: string,
  deps: AccessDeps,
): Promise<ReadVerdict> {
  const target = `service account ${clip(namespace)}/${clip(name)}`;
  const marks = await deps.targetMarks("serviceaccounts", namespace, name);
  const verdict = await judge(marks, user, namespace, target, IMPERSONATION, deps);
  if (!verdict.allowed || verdict.decision === "override") return verdict;
  // The account's own override would be the impersonator's: only a holder may lend it to themselves.
  const account: UserInfo = {
    username: accountUsername(namespace, name),
    groups: ["system:serviceaccounts", `system:serviceaccounts:${namespace}`, "system:authenticated"],
  };
  if (!(await deps.canOverride(account, namespace))) return verdict;
  if (await deps.canOverride(user, namespace))
    return {
      ...verdict,
      decision: "override",
      message: `compartment override: ${target} holds the override`,
    };
  return {
    allowed: false,
    decision: "refused",
    message: `Cannot impersonate ${target}: it holds the compartment override (force on compartmentoverrides.svc.dev), which you do not`,
  };
}
