import {
  type Compartment,
  clearancesOf,
  describeClearances,
  missingClearances,
  parseCompartmentLabel,
  parseCompartmentNote,
  parseLevelNote,
} from "../../lib/kube/clearance.ts";
import { COMPARTMENT_ANNOTATION, COMPARTMENT_LABEL, LEVEL_ANNOTATION } from "../../lib/kube/inject.ts";
import { marksOfPod, type PodMarks } from "../../lib/kube/pod-cache.ts";

/**
 * The admission webhook's decision for a request into a pod (docs/admission.md): CONNECT on pods/exec,
 * pods/attach, pods/portforward and pods/proxy, and UPDATE of pods/ephemeralcontainers (kubectl debug).
 * The pod's compartment marks (its label, and the mls.svc.dev annotations for the parts they name) are
 * compared with the requester's clearances (lib/kube/clearance.ts); a requester who is not cleared passes
 * only with the override permission. Anything the webhook cannot tell — a request
 * it was not written for, a pod it cannot find, a label it cannot read — is refused with the reason.
 */
export interface UserInfo {
  username?: string;
  uid?: string;
  groups?: string[];
  extra?: Record<string, string[]>;
}

export interface AdmissionRequest {
  uid: string;
  resource?: { group?: string; version?: string; resource?: string };
  subResource?: string;
  namespace?: string;
  name?: string;
  operation?: string;
  userInfo?: UserInfo;
  oldObject?: { metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> } } | null;
}

export type Decision = "allowed" | "refused" | "override" | "unlabeled";

export interface Verdict {
  allowed: boolean;
  decision: Decision;
  /** The refusal's text (section 7 of the specification), or why the request passed. */
  message: string;
  compartment?: string;
}

export type UnlabeledRule = "allow" | "deny";

export interface ReviewDeps {
  /** The pod's compartment marks; null when there is no such pod. */
  podMarks(namespace: string, name: string): Promise<PodMarks | null>;
  /** Whether the requester holds `force` on compartmentoverrides.svc.dev in the namespace. */
  canOverride(user: UserInfo, namespace: string): Promise<boolean>;
  unlabeled: UnlabeledRule;
}

const ACTIONS: Record<string, { operation: string; text: string }> = {
  exec: { operation: "CONNECT", text: "execute in" },
  attach: { operation: "CONNECT", text: "attach to" },
  portforward: { operation: "CONNECT", text: "forward ports to" },
  proxy: { operation: "CONNECT", text: "proxy to" },
  ephemeralcontainers: { operation: "UPDATE", text: "add a debug container to" },
};

/** The pod subresources the webhook decides. */
export const DECIDED = new Set(Object.keys(ACTIONS));

const str = (v: unknown) => (typeof v === "string" ? v : undefined);

/** Text from a caller's review, cut to `max` characters for a message or log line (it may be megabytes). */
export function clip(v: unknown, max = 100): string {
  const text = typeof v === "string" ? v : (JSON.stringify(v) ?? String(v));
  return text.length > max ? `${text.slice(0, max)}…` : text;
}
/** A value quoted as JSON, cut. */
const shown = (v: unknown) => clip(JSON.stringify(v) ?? String(v));

export async function review(req: AdmissionRequest, deps: ReviewDeps): Promise<Verdict> {
  // Every field is checked for its type: the review is JSON from whoever reached the webhook.
  const sub = str(req.subResource) ?? "";
  const namespace = str(req.namespace);
  const action = Object.hasOwn(ACTIONS, sub) ? ACTIONS[sub] : undefined;
  if (
    !action ||
    req.resource?.group !== "" ||
    req.resource?.resource !== "pods" ||
    req.operation !== action.operation ||
    !namespace ||
    !str(req.name)
  ) {
    const what = `${shown(req.resource?.resource)}/${shown(req.subResource)} ${shown(req.operation)}`;
    return refuse(
      `svc admission: this webhook decides exec, attach, port-forward, proxy and debug into pods, not ${what}; check the rules of the ValidatingWebhookConfiguration`,
    );
  }
  // The pod proxy's name is `name`, `name:port` or `scheme:name:port` (as the API server splits it).
  const name = sub === "proxy" ? proxiedPod(req.name as string) : (req.name as string);
  if (!name) return refuse(`svc admission: cannot read the pod in the proxy request ${shown(req.name)}`);
  const pod = `${clip(namespace)}/${clip(name)}`;
  // For an update of ephemeral containers the API server sends the stored pod as oldObject.
  const marks =
    sub === "ephemeralcontainers" && req.oldObject
      ? marksOfPod(req.oldObject.metadata)
      : await deps.podMarks(namespace, name);
  const user = req.userInfo ?? {};
  const groups = Array.isArray(user.groups)
    ? user.groups.filter((g): g is string => typeof g === "string")
    : [];
  const override = async (because: string, decision: Decision, compartment?: string): Promise<Verdict> =>
    (await deps.canOverride(user, namespace))
      ? {
          allowed: true,
          decision: "override",
          message: `compartment override: ${because}`,
          ...(compartment ? { compartment } : {}),
        }
      : { allowed: false, decision, message: because, ...(compartment ? { compartment } : {}) };

  if (marks === null) return override(`svc admission: pod ${pod} not found`, "refused");
  const named: [string, string | undefined, (v: string) => Partial<Compartment> | undefined, string][] = [
    [COMPARTMENT_LABEL, marks.compartment, parseCompartmentLabel, "<COUNTRY>-<SENSITIVITY>-<COMPARTMENT>"],
    [LEVEL_ANNOTATION, marks.level, parseLevelNote, "<country>:<sensitivity>"],
    [COMPARTMENT_ANNOTATION, marks.compartmentNote, parseCompartmentNote, "<country>:<compartment>"],
  ];
  const present = named.filter(([, value]) => value !== undefined);
  if (present.length === 0) {
    if (deps.unlabeled === "allow")
      return { allowed: true, decision: "unlabeled", message: `pod ${pod} has no compartment label` };
    return override(
      `Cannot ${action.text} pod without a compartment label (${pod} has no ${COMPARTMENT_LABEL} label; this cluster refuses unlabeled pods)`,
      "unlabeled",
    );
  }
  const compartment = clip(marks.compartment ?? marks.compartmentNote ?? marks.level ?? "");
  const clearances = clearancesOf(groups);
  const missing = new Set<string>();
  for (const [key, value, parse, shape] of present) {
    const target = parse(value as string);
    if (!target)
      return override(
        `svc admission: pod ${pod} has ${key}=${shown(value)}, which is not ${shape} (sensitivity TS, S, C or U)`,
        "refused",
        compartment,
      );
    for (const m of missingClearances(clearances, target)) missing.add(m);
  }
  if (missing.size === 0)
    return { allowed: true, decision: "allowed", message: `cleared for ${compartment}`, compartment };
  return override(
    `Cannot ${action.text} pod in another compartment (${compartment}); you are cleared for ${describeClearances(clearances)} (missing: ${[...missing].join(", ")})`,
    "refused",
    compartment,
  );
}

const refuse = (message: string): Verdict => ({ allowed: false, decision: "refused", message });

function proxiedPod(segment: string): string | undefined {
  const parts = segment.split(":");
  if (parts.length === 1 || parts.length === 2) return parts[0] || undefined;
  // An empty scheme is the API server's default (http).
  if (parts.length === 3 && ["", "http", "https"].includes(parts[0] as string)) return parts[1] || undefined;
  return undefined;
}
