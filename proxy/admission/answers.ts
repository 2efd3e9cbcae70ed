/**
 * The admission webhook's answers to the two reviews it takes: an AdmissionReview (POST /validate) and a
 * SubjectAccessReview (POST /authorize), each checked for shape and absurd user info before it is
 * decided, and decided only while the gate has room for another decision (gate.ts).
 */
import type { AccessAnswer, AccessReviewSpec } from "./authorize.ts";
import { userInfoProblem } from "./bounded.ts";
import type { Ticket } from "./gate.ts";
import { clip, shown } from "./request.ts";
import type { AdmissionRequest, Verdict } from "./review.ts";

/** The API server's request UID is a UUID; the review's apiVersion is echoed when it is this short. */
const MAX_UID = 256;
const MAX_API_VERSION = 64;

/** What answering needs: the decisions, and where bad requests are reported (at once, or throttled). */
export interface Answering {
  decide(request: AdmissionRequest): Promise<Verdict>;
  /**
   * A SubjectAccessReview's spec: denied with a reason, no opinion, or (a clearance question only,
   * authorize.ts) allowed with the clearances in the reason.
   */
  authorize(spec: AccessReviewSpec): Promise<{ answer: AccessAnswer; reason: string }>;
  /**
   * A malformed review (answered 400: the API server then applies the failure policy), or one turned away
   * before it was decided (a review not received in time, too many at once, absurd user info).
   */
  onBadRequest(message: string): void;
  /** onBadRequest at most once per interval, for what an attacker sends by the hundred. */
  note(message: string): void;
}

/** A plain-text answer; `close` ends the connection with it. */
export const plain = (status: number, text: string, close = false) =>
  new Response(`${text}\n`, {
    status,
    headers: {
      "content-type": "text/plain; charset=utf-8",
      // Bun sends the answer and closes at once, without waiting for a body it was not asked to read.
      ...(close ? { connection: "close" } : {}),
    },
  });

/** An AdmissionReview (admission.k8s.io/v1): checked, then decided when the gate has room. */
export async function answerReview(
  o: Answering,
  value: unknown,
  ticket: Ticket,
  address: string,
): Promise<Response> {
  const review = value as { apiVersion?: unknown; kind?: unknown; request?: AdmissionRequest } | null;
  const request = review?.request;
  if (review?.kind !== "AdmissionReview" || typeof request?.uid !== "string")
    return notA(o, "an AdmissionReview with request.uid", review?.kind);
  if (request.uid.length > MAX_UID) {
    o.onBadRequest(`request.uid has ${request.uid.length} characters (at most ${MAX_UID})`);
    return plain(400, `svc-proxy admission: request.uid is longer than ${MAX_UID} characters`);
  }
  const reply = (verdict: Verdict) =>
    Response.json({
      apiVersion: echoed(review.apiVersion, "admission.k8s.io/v1"),
      kind: "AdmissionReview",
      response: {
        uid: request.uid,
        allowed: verdict.allowed,
        ...(verdict.allowed ? {} : { status: { code: 403, reason: "Forbidden", message: verdict.message } }),
      },
    });
  // Refused before anything is asked, hashed, forwarded or logged for it.
  const absurd = userInfoProblem(request.userInfo);
  if (absurd) {
    o.note(`review ${clip(request.uid)} from ${address}: ${absurd}`);
    return reply({ allowed: false, decision: "refused", message: absurd });
  }
  return whenRoom(o, ticket, "review", address, async () => reply(await o.decide(request)));
}

/**
 * A SubjectAccessReview (authorization.k8s.io/v1): answered with status.allowed false (this webhook grants
 * nothing but the answer to a clearance question), and denied true with the reason when the read is
 * refused.
 */
export async function answerAccessReview(
  o: Answering,
  value: unknown,
  ticket: Ticket,
  address: string,
): Promise<Response> {
  const review = value as { apiVersion?: unknown; kind?: unknown; spec?: AccessReviewSpec } | null;
  const spec = review?.spec;
  if (review?.kind !== "SubjectAccessReview" || spec === null || typeof spec !== "object")
    return notA(o, "a SubjectAccessReview with a spec", review?.kind);
  const reply = (answer: AccessAnswer, reason: string) =>
    Response.json({
      apiVersion: echoed(review.apiVersion, "authorization.k8s.io/v1"),
      kind: "SubjectAccessReview",
      status: { allowed: answer === "allow", ...(answer === "deny" ? { denied: true } : {}), reason },
    });
  const absurd = userInfoProblem({
    username: spec.user,
    uid: spec.uid,
    groups: spec.groups,
    extra: spec.extra,
  });
  if (absurd) {
    o.note(`access review from ${address}: ${absurd}`);
    return reply("deny", absurd);
  }
  return whenRoom(o, ticket, "access review", address, async () => {
    const { answer, reason } = await o.authorize(spec);
    return reply(answer, reason);
  });
}

/** A body that is not the review this path takes: reported, and answered 400. */
function notA(o: Answering, expected: string, kind: unknown): Response {
  o.onBadRequest(`not ${expected} (kind ${shown(kind)})`);
  return plain(400, `svc-proxy admission: expected ${expected}`);
}

/** The gate's last bound (reviews being decided), then the decision; past the bound the answer is 429. */
function whenRoom(
  o: Answering,
  ticket: Ticket,
  what: string,
  address: string,
  then: () => Promise<Response>,
): Promise<Response> | Response {
  const full = ticket.decide();
  if (!full) return then();
  o.note(`${what} from ${address} answered 429: ${full}`);
  return plain(429, `svc-proxy admission: ${full}`);
}

/** The review's apiVersion, echoed when it is a short string; else `fallback`. */
function echoed(v: unknown, fallback: string): string {
  return typeof v === "string" && v.length <= MAX_API_VERSION ? v : fallback;
}
