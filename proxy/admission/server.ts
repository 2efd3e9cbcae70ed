import type { Server } from "bun";
import { SvcError } from "../../lib/errors.ts";
import type { HostPort } from "../config/types.ts";
import type { AccessAnswer, AccessReviewSpec } from "./authorize.ts";
import { userInfoProblem } from "./bounded.ts";
import { Gate, type GateLimits, type GateLoad, type Ticket } from "./gate.ts";
import { clip, shown } from "./request.ts";
import type { AdmissionRequest, Verdict } from "./review.ts";
import { throttled } from "./throttled.ts";
import type { TlsPair } from "./tls-files.ts";

/**
 * The admission webhook's HTTPS server: POST /validate takes an AdmissionReview (admission.k8s.io/v1) and
 * answers it; GET /healthz answers while the process runs, GET /readyz once the pod cache is filled.
 * A new serving certificate takes effect by starting a second server on the same port (SO_REUSEPORT) and
 * stopping the first gracefully: requests in flight finish, new connections get the new certificate.
 */
export interface AdmissionServerOptions {
  address: HostPort;
  tls: TlsPair;
  decide(request: AdmissionRequest): Promise<Verdict>;
  /**
   * A SubjectAccessReview's spec (POST /authorize): denied with a reason, no opinion, or (a clearance
   * question only, authorize.ts) allowed with the clearances in the reason.
   */
  authorize(spec: AccessReviewSpec): Promise<{ answer: AccessAnswer; reason: string }>;
  ready(): boolean;
  /**
   * A malformed review (answered 400: the API server then applies the failure policy), or one turned away
   * before it was decided (a review not received in time, too many at once, absurd user info). Those are
   * what an attacker sends by the hundred: they are reported at most once every REPORT_MS, with a count.
   */
  onBadRequest(message: string): void;
}

export const REVIEW_PATH = "/validate";
export const AUTHORIZE_PATH = "/authorize";
/**
 * A review of a pod or workload update holds the object and the old object, each at most etcd's 1.5 MiB
 * (as protobuf; their JSON is larger), with the review around them. Larger bodies are answered 413 by Bun
 * before they are read.
 */
const MAX_BODY = 4 * 1024 * 1024;
/**
 * The body must be in this long after the head: the API server writes a review at once, and a body of
 * MAX_BODY takes tens of milliseconds on a slow link. Past it the connection is closed (408), which leaves
 * the API server 3 of its 5 seconds.
 */
const BODY_MS = 2_000;
/**
 * Bun.serve's idle timeout (seconds), checked by a sweep every 4 s: a kept-alive connection is closed 8 to
 * 12 s after its last answer if no next head has come in (bytes of a head arriving slowly do not count),
 * and a review is cut 8 to 12 s after its head, past the body's and the decision's own deadlines. A new
 * connection's first head has a fixed 8 to 12 s in Bun that nothing here changes (docs/admission.md).
 */
const IDLE_S = 10;
/** Bounds on work in progress (gate.ts); docs/admission.md explains the numbers. */
export const GATE_LIMITS: GateLimits = {
  uploadsPerAddress: 32,
  uploads: 1024,
  bytesPerAddress: 16 * 1024 * 1024,
  bytes: 32 * 1024 * 1024,
  // The webhook cannot tell the API server's address from another. It sends bursts (a ReplicaSet creating
  // hundreds of pods, each a review, decided in well under a millisecond each): one address may have half
  // of all the reviews being decided.
  decidingPerAddress: 256,
  deciding: 512,
  // An API server's review is a few kilobytes; one over 1 MiB is an update of an object near etcd's limit.
  // Two of those are parsed at once at most, so an ordinary review waits behind at most two parses.
  largeBytes: 1024 * 1024,
  large: 2,
};
/** Reviews turned away at the door are reported once per this interval at most. */
const REPORT_MS = 10_000;
/** The API server's request UID is a UUID; the review's apiVersion is echoed when it is this short. */
const MAX_UID = 256;
const MAX_API_VERSION = 64;

export interface AdmissionServer {
  port: number;
  useCertificate(tls: TlsPair): void;
  /** Uploads, bytes and reviews held now (for tests and diagnostics). */
  load(): GateLoad;
  stop(): Promise<void>;
}

/**
 * SO_REUSEPORT would let this server share a port another process already serves: bind it once without
 * that option first, so that a port in use is an error at start, as for every other listener.
 */
function refuseTakenPort(address: HostPort): void {
  const host = address.host || "0.0.0.0";
  try {
    Bun.listen({ hostname: host, port: address.port, socket: { data() {} } }).stop(true);
  } catch (e) {
    throw new SvcError(
      "usage",
      `admission.address ${host}:${address.port}: cannot listen (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`,
    );
  }
}

export function startAdmissionServer(o: AdmissionServerOptions): AdmissionServer {
  const plain = (status: number, text: string, close = false) =>
    new Response(`${text}\n`, {
      status,
      headers: {
        "content-type": "text/plain; charset=utf-8",
        // Bun sends the answer and closes at once, without waiting for a body it was not asked to read.
        ...(close ? { connection: "close" } : {}),
      },
    });
  const gate = new Gate(GATE_LIMITS);
  const note = throttled(o.onBadRequest, REPORT_MS);
  const fetch = async (req: Request, server: Server<undefined>): Promise<Response> => {
    const path = new URL(req.url).pathname;
    if (req.method === "GET" && path === "/healthz") return plain(200, "ok");
    if (req.method === "GET" && path === "/readyz")
      return o.ready() ? plain(200, "ok") : plain(503, "pod cache not filled yet");
    const body = announced(req);
    const only = `svc-proxy admission: POST ${REVIEW_PATH} or ${AUTHORIZE_PATH} only`;
    if (path !== REVIEW_PATH && path !== AUTHORIZE_PATH) return plain(404, only, body > 0);
    if (req.method !== "POST") return plain(405, only, body > 0);
    return receive(
      req,
      clientAddress(server.requestIP(req)?.address),
      body,
      path === REVIEW_PATH ? answer : answerAccess,
    );
  };

  /** The body, within BODY_MS and the gate's bounds; then the review is answered. */
  const receive = async (
    req: Request,
    address: string,
    bytes: number,
    respond: (value: unknown, ticket: Ticket, address: string) => Promise<Response>,
  ): Promise<Response> => {
    let dropped = (_why: string) => {};
    const drop = new Promise<{ why: string }>((resolve) => {
      dropped = (why) => resolve({ why });
    });
    const ticket = gate.enter(address, bytes, (why) => dropped(why));
    if (typeof ticket === "string") {
      note(`review from ${address} answered 429: ${ticket}`);
      return plain(429, `svc-proxy admission: ${ticket}`, true);
    }
    const late = setTimeout(() => ticket.drop(`not received within ${BODY_MS / 1000}s of its head`), BODY_MS);
    try {
      const read = req.json().then(
        (value: unknown) => ({ value }),
        (error: Error) => ({ error }),
      );
      const first = await Promise.race([read, drop]);
      // Dropped, or dropped just as its body came in: the connection closes with the answer.
      if ("why" in first || !ticket.received()) {
        const why = "why" in first ? first.why : "dropped";
        note(`review from ${address} ${why}; connection closed`);
        return plain(408, `svc-proxy admission: review ${why}; connection closed`, true);
      }
      if ("error" in first) {
        if (req.signal.aborted) {
          note(`review from ${address}: the connection closed before its body was in`);
          return plain(400, "svc-proxy admission: the body is not JSON");
        }
        o.onBadRequest(`body is not JSON: ${clip(first.error.message, 200)}`);
        return plain(400, "svc-proxy admission: the body is not JSON");
      }
      return await respond(first.value, ticket, address);
    } finally {
      clearTimeout(late);
      ticket.done();
    }
  };

  const answer = async (value: unknown, ticket: Ticket, address: string): Promise<Response> => {
    const review = value as { apiVersion?: unknown; kind?: unknown; request?: AdmissionRequest } | null;
    const request = review?.request;
    if (review?.kind !== "AdmissionReview" || typeof request?.uid !== "string") {
      o.onBadRequest(`not an AdmissionReview with request.uid (kind ${shown(review?.kind)})`);
      return plain(400, "svc-proxy admission: expected an AdmissionReview with request.uid");
    }
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
          ...(verdict.allowed
            ? {}
            : { status: { code: 403, reason: "Forbidden", message: verdict.message } }),
        },
      });
    // Refused before anything is asked, hashed, forwarded or logged for it.
    const absurd = userInfoProblem(request.userInfo);
    if (absurd) {
      note(`review ${clip(request.uid)} from ${address}: ${absurd}`);
      return reply({ allowed: false, decision: "refused", message: absurd });
    }
    return whenRoom(ticket, "review", address, async () => reply(await o.decide(request)));
  };

  /**
   * A SubjectAccessReview (authorization.k8s.io/v1): answered with status.allowed false (this webhook grants
   * nothing but the answer to a clearance question), and denied true with the reason when the read is
   * refused.
   */
  const answerAccess = async (value: unknown, ticket: Ticket, address: string): Promise<Response> => {
    const review = value as { apiVersion?: unknown; kind?: unknown; spec?: AccessReviewSpec } | null;
    const spec = review?.spec;
    if (review?.kind !== "SubjectAccessReview" || spec === null || typeof spec !== "object") {
      o.onBadRequest(`not a SubjectAccessReview with a spec (kind ${shown(review?.kind)})`);
      return plain(400, "svc-proxy admission: expected a SubjectAccessReview with a spec");
    }
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
      note(`access review from ${address}: ${absurd}`);
      return reply("deny", absurd);
    }
    return whenRoom(ticket, "access review", address, async () => {
      const { answer, reason } = await o.authorize(spec);
      return reply(answer, reason);
    });
  };

  /** The gate's last bound (reviews being decided), then the decision; past the bound the answer is 429. */
  const whenRoom = (
    ticket: Ticket,
    what: string,
    address: string,
    then: () => Promise<Response>,
  ): Promise<Response> | Response => {
    const full = ticket.decide();
    if (!full) return then();
    note(`${what} from ${address} answered 429: ${full}`);
    return plain(429, `svc-proxy admission: ${full}`);
  };

  const serve = (tls: TlsPair, port: number): Server<undefined> =>
    Bun.serve({
      hostname: o.address.host || "0.0.0.0",
      port,
      reusePort: true,
      maxRequestBodySize: MAX_BODY,
      idleTimeout: IDLE_S,
      tls,
      fetch,
      error: (e) => {
        o.onBadRequest(`internal error: ${e.message.slice(0, 200)}`);
        return plain(500, "svc-proxy admission: internal error");
      },
    });
  if (o.address.port !== 0) refuseTakenPort(o.address);
  let server = serve(o.tls, o.address.port);
  const port = server.port as number;
  return {
    port,
    useCertificate(tls) {
      const previous = server;
      server = serve(tls, port);
      void previous.stop();
    },
    load: () => gate.load(),
    async stop() {
      await server.stop();
    },
  };
}

/** The review's apiVersion, echoed when it is a short string; else `fallback`. */
function echoed(v: unknown, fallback: string): string {
  return typeof v === "string" && v.length <= MAX_API_VERSION ? v : fallback;
}

/** Bytes a request says its body has: its Content-Length, or MAX_BODY when it is sent in chunks. */
function announced(req: Request): number {
  const length = req.headers.get("content-length");
  if (length !== null) {
    const n = Number(length);
    return Number.isSafeInteger(n) && n >= 0 ? Math.min(n, MAX_BODY) : MAX_BODY;
  }
  return req.headers.has("transfer-encoding") ? MAX_BODY : 0;
}

/** The client's address as the bounds count it: an IPv4 client of a dual-stack socket as IPv4. */
function clientAddress(address: string | undefined): string {
  if (!address) return "unknown";
  return address.startsWith("::ffff:") && address.includes(".") ? address.slice(7) : address;
}
