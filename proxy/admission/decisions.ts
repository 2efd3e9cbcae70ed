/**
 * The decisions of the admission webhook (review.ts) and the authorization webhook (authorize.ts), made
 * alike: within a deadline (past it, or on an error, the request is refused and says why), with the
 * cluster reads of one decision (cluster-reads.ts), counted in the metrics and logged, an override as a
 * warning and a refusal at info.
 */
import type { AdmissionConfig } from "../config/types.ts";
import type { Logger } from "../log.ts";
import type { AdmissionMetrics } from "../metrics.ts";
import {
  type AccessAnswer,
  type AccessReviewSpec,
  CLEARANCE,
  decideRead,
  guardedRead,
  IMPERSONATE,
  type ReadVerdict,
} from "./authorize.ts";
import type { ClusterReads, DecisionReads } from "./cluster-reads.ts";
import { type AdmissionRequest, clip, type UserInfo, type Verdict } from "./request.ts";
import { review, reviewLabel } from "./review.ts";

/** One deadline for a review's lookups, under the API server's 5 s. */
const DECIDE_MS = 4_000;
/** The same for an access review, under deploy/admission/authorization's 3 s: the denial says why. */
const AUTHORIZE_MS = 2_500;

export interface DecisionDeps extends Pick<AdmissionConfig, "unlabeledPods" | "unlabeledReads"> {
  reads: ClusterReads;
  canOverride(user: UserInfo, namespace: string): Promise<boolean>;
  metrics: AdmissionMetrics | undefined;
  log: Logger;
}

export interface Decisions {
  /** An admission review's verdict. */
  decide(request: AdmissionRequest): Promise<Verdict>;
  /** An access review's answer: allow (a clearance spoken for), deny, or no opinion. */
  authorize(spec: AccessReviewSpec): Promise<{ answer: AccessAnswer; reason: string }>;
}

export function decisions(d: DecisionDeps): Decisions {
  /**
   * One decision of either webhook: `work` within `ms` (past it, or on an error, the request is refused
   * with why), counted under `label`, and logged, an override as a warning and a refusal as `refused`.
   */
  const decided = async <V extends ReadVerdict>(
    work: (reads: DecisionReads) => Promise<V>,
    ms: number,
    names: { failed: (why: string) => string; refused: string; passed: string; label: () => string },
    about: { user: unknown; groups: unknown; operation: string; object: string; uid?: unknown },
  ): Promise<V | Verdict> => {
    const started = performance.now();
    let verdict: V | Verdict;
    try {
      verdict = await withDeadline(work(d.reads.forDecision()), ms);
    } catch (e) {
      verdict = {
        allowed: false,
        decision: "refused",
        message: names.failed((e as Error).message),
      };
    }
    // Metric label values stay few: anything else a caller sends is counted as "other".
    d.metrics?.review(names.label(), verdict.decision, (performance.now() - started) / 1000);
    const { groups } = about;
    const fields = {
      decision: verdict.decision,
      user: clip(about.user),
      groups: Array.isArray(groups) ? groups.slice(0, 50).map((g) => clip(g)) : clip(groups),
      operation: about.operation,
      object: about.object,
      compartment: "compartment" in verdict && verdict.compartment ? clip(verdict.compartment) : undefined,
      ...(about.uid !== undefined ? { uid: clip(about.uid) } : {}),
      message: clip(verdict.message, 1000),
    };
    if (verdict.decision === "override") d.log.warn("compartment override", fields);
    else if (refusal(verdict)) d.log.info(names.refused, fields);
    else d.log.debug(names.passed, fields);
    return verdict;
  };

  const decide = (request: AdmissionRequest) =>
    decided(
      (reads) => review(request, { ...reads, canOverride: d.canOverride, unlabeled: d.unlabeledPods }),
      DECIDE_MS,
      {
        failed: (why) => `svc admission: cannot decide (${why}); refused`,
        refused: "refused",
        passed: "allowed",
        label: () => reviewLabel(request),
      },
      {
        user: request.userInfo?.username,
        groups: request.userInfo?.groups,
        operation: operationOf(request.operation, request.resource?.resource, request.subResource),
        object: `${clip(request.namespace)}/${clip(request.name)}`,
        uid: request.uid,
      },
    );

  /** The authorization webhook's reads (authorize.ts), logged and counted as the reviews are. */
  const authorize = async (spec: AccessReviewSpec): Promise<{ answer: AccessAnswer; reason: string }> => {
    const a = spec.resourceAttributes;
    const verdict = await decided(
      (reads) => decideRead(spec, { ...reads, canOverride: d.canOverride, unlabeled: d.unlabeledReads }),
      AUTHORIZE_MS,
      {
        failed: (why) => `svc authorization: cannot decide (${why}); denied`,
        refused: "read denied",
        passed: "no opinion",
        label: () => {
          const key = guardedRead(spec);
          if (key === IMPERSONATE) return "impersonate serviceaccounts";
          if (key === CLEARANCE) return "speaks for";
          return key ? `read ${key.replace(/\/$/, "")}` : "read other";
        },
      },
      {
        user: spec.user,
        groups: spec.groups,
        operation: operationOf(a?.verb, a?.resource, a?.subresource),
        object: `${clip(a?.namespace)}/${clip(a?.name)}`,
      },
    );
    const answer: AccessAnswer =
      verdict.decision === "speaks_for" ? "allow" : refusal(verdict) ? "deny" : "none";
    return { answer, reason: verdict.message };
  };

  return { decide, authorize };
}

/** "CONNECT pods/exec", "get secrets": what a logged decision was about. */
const operationOf = (verb: unknown, resource: unknown, subresource: unknown) =>
  `${clip(verb)} ${clip(resource)}${subresource ? `/${clip(subresource)}` : ""}`;

/** A decision that refuses (an admission review) or denies (a read); no opinion refuses nothing. */
const refusal = (v: ReadVerdict): boolean => "allowed" in v && !v.allowed;

function withDeadline<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms / 1000}s`)), ms);
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}
