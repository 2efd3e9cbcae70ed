/**
 * Which compartment a requester speaks for (docs/admission.md, "Identities"), as the clearance groups it
 * holds (`svc:country:<c>`, `svc:sensitivity:<s>`, `svc:compartment:<c>`, read by lib/kube/clearance.ts):
 * - a person: the `svc:` groups the cluster authenticated them with;
 * - a service account with a token bound to a pod (its `authentication.kubernetes.io/pod-name` and
 *   `pod-uid` extras): that pod's compartment, while the pod of that UID exists, and only when the account,
 *   if it is marked, is of the same compartment;
 * - any other token of a service account (a legacy Secret token, a token bound to a Secret, an
 *   impersonation): the account's own marks.
 * A service account's `svc:` groups are ignored: only an impersonation can set them. Anything that cannot
 * be told (a pod or account that is gone, marks that cannot be read or that disagree, one pod extra without
 * the other) speaks for no compartment, and `because` says why.
 */
import { compartmentOf } from "../../lib/kube/clearance.ts";
import type { CachedKind, MarksEntry } from "../../lib/kube/marks-cache.ts";
import { REFUSAL } from "../../lib/kube/mls.ts";
import { ACCOUNT_PREFIX, serviceAccountOf } from "../../lib/kube/service-account.ts";
import { clip, groupsOf, str, type UserInfo } from "./request.ts";

export interface IdentityDeps {
  /** The marks and UID of an object of a cached kind (from the caches); null when there is none. */
  entry(kind: CachedKind, namespace: string, name: string): Promise<MarksEntry | null>;
}

export interface SpokenFor {
  groups: string[];
  because: string;
}

const POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name";
const POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid";

/** The one value of an extra; undefined when absent, "" when it is not exactly one string. */
function oneExtra(user: UserInfo, key: string): string | undefined {
  const extra = user.extra;
  if (!extra || typeof extra !== "object" || !Object.hasOwn(extra, key)) return undefined;
  const values = extra[key];
  return Array.isArray(values) && values.length === 1 ? (str(values[0]) ?? "") : "";
}

/** The clearance groups a marked object stands for: the parts its marks name; `marked` when it has marks. */
function groupsOfMarks(entry: MarksEntry, what: string): SpokenFor & { marked: boolean } {
  const read = compartmentOf(entry);
  if (read.kind === "unreadable")
    return { ...none(`${what} ${REFUSAL.unreadable}: ${read.why}`), marked: true };
  if (read.kind === "none") return { ...none(`${what} has no compartment marks`), marked: false };
  const { country, sensitivity, compartment } = read.parts;
  return {
    marked: true,
    groups: [
      ...(country ? [`svc:country:${country}`] : []),
      ...(sensitivity ? [`svc:sensitivity:${sensitivity}`] : []),
      ...(compartment ? [`svc:compartment:${compartment}`] : []),
    ],
    because: `${what} is of ${read.shown}`,
  };
}

const none = (because: string): SpokenFor => ({ groups: [], because });

export async function speaksFor(user: UserInfo, deps: IdentityDeps): Promise<SpokenFor> {
  const username = str(user.username) ?? "";
  if (!username.startsWith(ACCOUNT_PREFIX))
    return { groups: groupsOf(user).filter((g) => g.startsWith("svc:")), because: "groups" };
  // The policy asks for every name of this prefix (its variables.isAccount): one of another shape is no one.
  const account = serviceAccountOf(username);
  if (!account)
    return none(
      `${clip(username)} is not a service account's name (system:serviceaccount:<namespace>:<name>)`,
    );
  const { namespace, name } = account;
  const accountWhat = `service account ${clip(namespace)}/${clip(name)}`;
  const podName = oneExtra(user, POD_NAME_EXTRA);
  const podUid = oneExtra(user, POD_UID_EXTRA);
  const own = await deps.entry("serviceaccounts", namespace, name);
  if (own === null) return none(`${accountWhat} does not exist`);
  const ofAccount = groupsOfMarks(own, accountWhat);
  if (podName === undefined && podUid === undefined) return ofAccount;
  if (!podName || !podUid)
    return none(`the token of ${accountWhat} names its pod by ${podName ? "name" : "UID"} alone`);
  const podWhat = `pod ${clip(namespace)}/${clip(podName)}`;
  const pod = await deps.entry("pods", namespace, podName);
  if (pod === null || pod.uid !== podUid) return none(`${podWhat} of UID ${clip(podUid)} is gone`);
  const ofPod = groupsOfMarks(pod, `${podWhat}, whose token it is,`);
  // A marked account runs only pods of its compartment (the references rule); one that does not is told.
  if (ofAccount.marked && ofAccount.groups.join(" ") !== ofPod.groups.join(" "))
    return none(`${podWhat} and ${accountWhat}, whose token it holds, are of different compartments`);
  return ofPod;
}
