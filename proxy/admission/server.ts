/**
 * The admission webhook's HTTPS server: POST /validate takes an AdmissionReview and POST /authorize a
 * SubjectAccessReview, read within BODY_MS and the gate's bounds and answered (answers.ts); GET /healthz
 * answers while the process runs, GET /readyz once the pod cache is filled.
 * A new serving certificate takes effect by starting a second server on the same port (SO_REUSEPORT) and
 * stopping the first gracefully: requests in flight finish, new connections get the new certificate.
 */
import type { Server } from "bun";
import { SvcError } from "../../lib/errors.ts";
import type { HostPort } from "../config/types.ts";
import { type Answering, answerAccessReview, answerReview, plain } from "./answers.ts";
import { Gate, type GateLimits, type GateLoad, type Ticket } from "./gate.ts";
import { clip } from "./request.ts";
import { throttled } from "./throttled.ts";
import type { TlsPair } from "./tls-files.ts";

export interface AdmissionServerOptions extends Omit<Answering, "note"> {
  address: HostPort;
  tls: TlsPair;
  ready(): boolean;
}

const REVIEW_PATH = "/validate";
const AUTHORIZE_PATH = "/authorize";
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
  const gate = new Gate(GATE_LIMITS);
  const note = throttled(o.onBadRequest, REPORT_MS);
  const answering: Answering = { ...o, note };
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
      path === REVIEW_PATH ? answerReview : answerAccessReview,
    );
  };

  /** The body, within BODY_MS and the gate's bounds; then the review is answered. */
  const receive = async (
    req: Request,
    address: string,
    bytes: number,
    respond: (o: Answering, value: unknown, ticket: Ticket, address: string) => Promise<Response>,
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
      return await respond(answering, first.value, ticket, address);
    } finally {
      clearTimeout(late);
      ticket.done();
    }
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
