import {
  clearancesOf,
  describeClearances,
  missingClearances,
  parseCompartmentLabel,
} from "../../lib/kube/clearance.ts";
import { COMPARTMENT_LABEL } from "../../lib/kube/inject.ts";

/**
 * The admission webhook's decision for a request into a pod (docs/admission.md): CONNECT on pods/exec,
 * pods/attach, pods/portforward and pods/proxy, and UPDATE of pods/ephemeralcontainers (kubectl debug). The pod's
 * compartment label is compared with the requester's clearances (lib/kube/clearance.ts); a requester who
 * is not cleared passes only with the override permission. Anything the webhook cannot tell — a request
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
  oldObject?: { metadata?: { labels?: Record<string, string> } } | null;
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
  /** The pod's compartment label: undefined when it has none, null when there is no such pod. */
  podCompartment(namespace: string, name: string): Promise<string | undefined | null>;
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

export async function review(req: AdmissionRequest, deps: ReviewDeps): Promise<Verdict> {
  const sub = req.subResource ?? "";
  const action = Object.hasOwn(ACTIONS, sub) ? ACTIONS[sub] : undefined;
  const what = `${req.resource?.resource ?? "?"}/${sub || "-"} ${req.operation ?? "?"}`;
  if (
    !action ||
    req.resource?.group !== "" ||
    req.resource?.resource !== "pods" ||
    req.operation !== action.operation ||
    !req.namespace ||
    !req.name
  ) {
    return refuse(
      `svc admission: this webhook decides exec, attach, port-forward, proxy and debug into pods, not ${what}; check the rules of the ValidatingWebhookConfiguration`,
    );
  }
  // The pod proxy's name is `name`, `name:port` or `scheme:name:port` (as the API server splits it).
  const name = sub === "proxy" ? proxiedPod(req.name) : req.name;
  if (!name)
    return refuse(`svc admission: cannot read the pod in the proxy request ${JSON.stringify(req.name)}`);
  const pod = `${req.namespace}/${name}`;
  // For an update of ephemeral containers the API server sends the stored pod as oldObject.
  const label =
    sub === "ephemeralcontainers" && req.oldObject
      ? (req.oldObject.metadata?.labels?.[COMPARTMENT_LABEL] ?? undefined)
      : await deps.podCompartment(req.namespace, name);
  const user = req.userInfo ?? {};
  const override = async (because: string, decision: Decision, compartment?: string): Promise<Verdict> =>
    (await deps.canOverride(user, req.namespace as string))
      ? {
          allowed: true,
          decision: "override",
          message: `compartment override: ${because}`,
          ...(compartment ? { compartment } : {}),
        }
      : { allowed: false, decision, message: because, ...(compartment ? { compartment } : {}) };

  if (label === null) return override(`svc admission: pod ${pod} not found`, "refused");
  if (label === undefined) {
    if (deps.unlabeled === "allow")
      return { allowed: true, decision: "unlabeled", message: `pod ${pod} has no compartment label` };
    return override(
      `Cannot ${action.text} pod without a compartment label (${pod} has no ${COMPARTMENT_LABEL} label; this cluster refuses unlabeled pods)`,
      "unlabeled",
    );
  }
  const target = parseCompartmentLabel(label);
  const clearances = clearancesOf(user.groups ?? []);
  if (!target)
    return override(
      `svc admission: pod ${pod} has label ${COMPARTMENT_LABEL}=${JSON.stringify(label)}, which is not <COUNTRY>-<SENSITIVITY>-<COMPARTMENT> (sensitivity TS, S, C or U)`,
      "refused",
      label,
    );
  const missing = missingClearances(clearances, target);
  if (missing.length === 0)
    return { allowed: true, decision: "allowed", message: `cleared for ${label}`, compartment: label };
  return override(
    `Cannot ${action.text} pod in another compartment (${label}); you are cleared for ${describeClearances(clearances)} (missing: ${missing.join(", ")})`,
    "refused",
    label,
  );
}

const refuse = (message: string): Verdict => ({ allowed: false, decision: "refused", message });

function proxiedPod(segment: string): string | undefined {
  const parts = segment.split(":");
  if (parts.length === 1 || parts.length === 2) return parts[0] || undefined;
  if (parts.length === 3 && (parts[0] === "http" || parts[0] === "https")) return parts[1] || undefined;
  return undefined;
}
