/**
 * The parts of an AdmissionReview (admission.k8s.io/v1) the webhook reads, and what it answers. Every
 * field comes from whoever reached the webhook: each is checked for its type where it is read, and what
 * is echoed into a message or log line is cut (clip).
 */
export interface UserInfo {
  username?: string;
  uid?: string;
  groups?: string[];
  extra?: Record<string, string[]>;
}

export interface AdmissionRequest {
  uid: string;
  kind?: { group?: string; version?: string; kind?: string };
  resource?: { group?: string; version?: string; resource?: string };
  subResource?: string;
  namespace?: string;
  name?: string;
  operation?: string;
  userInfo?: UserInfo;
  object?: unknown;
  oldObject?: unknown;
}

export type Decision = "allowed" | "refused" | "override" | "unlabeled";

export interface Verdict {
  allowed: boolean;
  decision: Decision;
  /** The refusal's text (docs/admission.md, "Into pods and onto objects: the webhook"), or why the request passed. */
  message: string;
  compartment?: string;
}

export type UnlabeledRule = "allow" | "deny";

export const str = (v: unknown) => (typeof v === "string" ? v : undefined);

/** Text from a caller's review, cut to `max` characters for a message or log line (it may be megabytes). */
export function clip(v: unknown, max = 100): string {
  if (typeof v === "string") return v.length > max ? `${v.slice(0, max)}…` : v;
  // Only scalars are shown whole: an object or array from a caller is named by its type, never serialised.
  if (v === null || typeof v === "number" || typeof v === "boolean" || v === undefined) return String(v);
  return Array.isArray(v) ? "(a list)" : "(an object)";
}
/** A value quoted as JSON, cut. */
export const shown = (v: unknown) => (typeof v === "string" ? JSON.stringify(clip(v)) : clip(v));

export const refuse = (message: string, compartment?: string): Verdict => ({
  allowed: false,
  decision: "refused",
  message,
  ...(compartment ? { compartment } : {}),
});

/**
 * A refusal, unless the requester holds the override (`force` on compartmentoverrides.svc.dev in the
 * namespace): then it passes, as an override, with the refusal's words after "compartment override: ".
 */
export async function unlessOverridden(
  refusal: Verdict,
  user: UserInfo,
  namespace: string,
  canOverride: (user: UserInfo, namespace: string) => Promise<boolean>,
): Promise<Verdict> {
  if (!(await canOverride(user, namespace))) return refusal;
  return {
    ...refusal,
    allowed: true,
    decision: "override",
    message: `compartment override: ${refusal.message}`,
  };
}

export const groupsOf = (user: UserInfo | undefined): string[] =>
  Array.isArray(user?.groups) ? user.groups.filter((g): g is string => typeof g === "string") : [];

/** The requesters the ValidatingAdmissionPolicy leaves out (deploy/admission/base/policy.yaml). */
export function isControlPlane(user: UserInfo | undefined): boolean {
  const name = str(user?.username) ?? "";
  return (
    name === "system:kube-controller-manager" ||
    name === "system:kube-scheduler" ||
    name.startsWith("system:node:") ||
    name.startsWith("system:serviceaccount:kube-system:")
  );
}

/** "Deployment shared/web": what a message calls the object under review. */
export function describe(req: AdmissionRequest, object: unknown): string {
  const meta = (object as { metadata?: { name?: unknown; generateName?: unknown } } | null)?.metadata;
  const name = str(meta?.name) || str(req.name) || `${str(meta?.generateName) ?? ""}(new)`;
  return `${clip(req.kind?.kind ?? req.resource?.resource)} ${clip(req.namespace)}/${clip(name)}`;
}
