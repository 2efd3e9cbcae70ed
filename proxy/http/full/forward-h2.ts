import type { OutgoingHttpHeaders } from "node:http";
import http2 from "node:http2";
import { pipeline } from "node:stream";
import type { TLSSocket } from "node:tls";
import { upstreamFailure } from "../failure.ts";
import { endToEnd } from "../headers.ts";
import type { Handler, ProxyResponse, Upstream } from "../types.ts";

/**
 * The full path's forwarder to an HTTP/2 target (listeners with `connection.http2`): h2c to an http://
 * target, ALPN h2 over TLS to an https:// one (SPIFFE mTLS in client and central modes). Requests are
 * streams multiplexed on one session per target; bodies stream both ways, and the target's trailers
 * (gRPC's grpc-status and grpc-message) are passed on. A caller that goes away resets its stream upstream,
 * and a target that resets a stream ends the caller's.
 */
export interface H2Options {
  target: URL;
  /** The session to the target: made on first use and again after it closed (GOAWAY, error, rotation). */
  session: () => http2.ClientHttp2Session;
  identify?: (socket: TLSSocket) => Upstream | undefined;
}

const { NGHTTP2_CANCEL, NGHTTP2_FLAG_END_STREAM } = http2.constants;
/** gRPC's status fields: in a trailers-only answer they arrive as headers and are passed on as trailers. */
const GRPC_STATUS_FIELDS = ["grpc-status", "grpc-message", "grpc-status-details-bin"];

export function h2Forwarder(o: H2Options): Handler {
  const authority = o.target.host;
  const scheme = o.target.protocol === "https:" ? "https" : "http";
  return (req) =>
    new Promise<ProxyResponse>((resolve) => {
      let stream: http2.ClientHttp2Stream;
      try {
        const headers: OutgoingHttpHeaders = endToEnd(req.headers, false);
        delete headers.host;
        // The one TE value HTTP/2 allows, and which gRPC servers require.
        if (/(^|,)\s*trailers\s*(,|$)/i.test(String(req.headers.te ?? ""))) headers.te = "trailers";
        stream = o.session().request({
          ...headers,
          ":method": req.method,
          ":path": req.path,
          ":authority": authority,
          ":scheme": scheme,
        });
      } catch (e) {
        resolve(upstreamFailure(o.target, e as Error));
        return;
      }
      // A caller that goes away resets the stream at the target. Not the request option `signal`: that
      // one also fires for a stream already finished, and makes it fail, which costs more than the call.
      const cancel = () => {
        if (!stream.closed) stream.close(NGHTTP2_CANCEL);
      };
      req.signal.addEventListener("abort", cancel, { once: true });
      stream.once("close", () => req.signal.removeEventListener("abort", cancel));
      let answered = false;
      const trailerListeners: ((t: OutgoingHttpHeaders) => void)[] = [];
      stream.once("error", (e) => {
        if (!answered) resolve(upstreamFailure(o.target, e));
      });
      stream.once("response", (received, flags) => {
        answered = true;
        const headers = endToEnd(received, false);
        const status = Number(received[":status"] ?? 502);
        let early: OutgoingHttpHeaders | undefined;
        if ((flags & NGHTTP2_FLAG_END_STREAM) !== 0 && received["grpc-status"] !== undefined) {
          early = {};
          for (const f of GRPC_STATUS_FIELDS)
            if (headers[f] !== undefined) {
              early[f] = headers[f];
              delete headers[f];
            }
        }
        const upstream = o.identify?.(stream.session?.socket as TLSSocket);
        resolve({
          status,
          headers,
          body: stream,
          trailers: (listener) => {
            if (early) listener(early);
            else trailerListeners.push(listener);
          },
          ...(upstream ? { upstream } : {}),
        });
      });
      stream.on("trailers", (t) => {
        const trailers = endToEnd(t, false);
        for (const l of trailerListeners) l(trailers);
      });
      pipeline(req.body, stream, (e) => {
        if (e && !stream.destroyed) stream.close(NGHTTP2_CANCEL);
      });
    });
}
