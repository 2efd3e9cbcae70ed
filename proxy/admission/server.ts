import type { Server } from "bun";
import { SvcError } from "../../lib/errors.ts";
import type { HostPort } from "../config/validate.ts";
import type { AdmissionRequest, Verdict } from "./review.ts";
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
  ready(): boolean;
  /** A malformed review (answered 400): the API server then applies the failure policy. */
  onBadRequest(message: string): void;
}

export const REVIEW_PATH = "/validate";
/** A review of a pod update holds the object and the old object: a few MB at most. */
const MAX_BODY = 4 * 1024 * 1024;
/** Reviews decided at once; beyond, 429 (the API server then applies the failure policy). */
const MAX_IN_FLIGHT = 512;

export interface AdmissionServer {
  port: number;
  useCertificate(tls: TlsPair): void;
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
  const plain = (status: number, text: string) =>
    new Response(`${text}\n`, { status, headers: { "content-type": "text/plain; charset=utf-8" } });
  const fetch = async (req: Request): Promise<Response> => {
    const path = new URL(req.url).pathname;
    if (req.method === "GET" && path === "/healthz") return plain(200, "ok");
    if (req.method === "GET" && path === "/readyz")
      return o.ready() ? plain(200, "ok") : plain(503, "pod cache not filled yet");
    if (path !== REVIEW_PATH) return plain(404, `svc-proxy admission: POST ${REVIEW_PATH} only`);
    if (req.method !== "POST") return plain(405, `svc-proxy admission: POST ${REVIEW_PATH} only`);
    if (inFlight >= MAX_IN_FLIGHT) return plain(429, "svc-proxy admission: too many reviews at once");
    inFlight++;
    try {
      return await answer(req);
    } finally {
      inFlight--;
    }
  };
  let inFlight = 0;
  const answer = async (req: Request): Promise<Response> => {
    let review: { apiVersion?: string; kind?: string; request?: AdmissionRequest };
    try {
      review = (await req.json()) as typeof review;
    } catch (e) {
      o.onBadRequest(`body is not JSON: ${(e as Error).message}`);
      return plain(400, "svc-proxy admission: the body is not JSON");
    }
    const request = review?.request;
    if (review?.kind !== "AdmissionReview" || typeof request?.uid !== "string") {
      o.onBadRequest(`not an AdmissionReview with request.uid (kind ${JSON.stringify(review?.kind)})`);
      return plain(400, "svc-proxy admission: expected an AdmissionReview with request.uid");
    }
    const verdict = await o.decide(request);
    return Response.json({
      apiVersion: review.apiVersion ?? "admission.k8s.io/v1",
      kind: "AdmissionReview",
      response: {
        uid: request.uid,
        allowed: verdict.allowed,
        ...(verdict.allowed ? {} : { status: { code: 403, reason: "Forbidden", message: verdict.message } }),
      },
    });
  };
  const serve = (tls: TlsPair, port: number): Server<undefined> =>
    Bun.serve({
      hostname: o.address.host || "0.0.0.0",
      port,
      reusePort: true,
      maxRequestBodySize: MAX_BODY,
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
    async stop() {
      await server.stop();
    },
  };
}
