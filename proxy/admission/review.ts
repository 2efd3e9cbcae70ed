/**
 * The admission webhook's decision for one review (docs/admission.md): a create or update of an object
 * (what it names, and its owners) is decided by consistency.ts, everything else — into and onto pods,
 * scale, tokens, other subresources — by access.ts, which refuses requests it was not written for.
 */
import { ACCESS_DECIDED, type AccessDeps, accessKey, decideAccess } from "./access.ts";
import { CONSISTENCY_KINDS, type ConsistencyDeps, decideConsistency } from "./consistency.ts";
import { type AdmissionRequest, str, type Verdict } from "./request.ts";

export type ReviewDeps = AccessDeps & ConsistencyDeps;
export type { AdmissionRequest, Verdict } from "./request.ts";

export async function review(req: AdmissionRequest, deps: ReviewDeps): Promise<Verdict> {
  if (isObjectWrite(req)) return decideConsistency(req, deps);
  const access = await decideAccess(req, deps);
  // kubectl debug adds containers to a pod: they may name only what the pod may (its references).
  if (access.allowed && accessKey(req) === "pods/ephemeralcontainers") {
    const references = await decideConsistency(req, deps);
    if (!references.allowed || references.decision === "override") return references;
  }
  return access;
}

/** A write of an object itself (any kind; POST bindings is a pod's binding, decided by its pod). */
const isObjectWrite = (req: AdmissionRequest) =>
  !req.subResource &&
  req.operation !== "CONNECT" &&
  !((str(req.resource?.group) ?? "") === "" && req.resource?.resource === "bindings");

/** What a review is counted as in the metrics: a few known values, "other" for anything else. */
export function reviewLabel(req: AdmissionRequest): string {
  const resource = str(req.resource?.resource) ?? "";
  if (isObjectWrite(req)) return CONSISTENCY_KINDS.has(resource) ? resource : "objects";
  const key = accessKey(req);
  if (!ACCESS_DECIDED.has(key)) return "other";
  return key.endsWith("/") ? key.slice(0, -1) : (key.split("/")[1] as string);
}
