/**
 * The full path's forwarder to an HTTP/2 target (listeners with `connection.http2`): h2c to an http://
 * target, ALPN h2 over TLS to an https:// one (SPIFFE mTLS in client and central modes). Requests are
 * streams multiplexed on one session per caller connection (target.ts); bodies stream both ways, and the
 * target's trailers (gRPC's grpc-status and grpc-message) are passed on. A caller that goes away resets its stream upstream,
 * and a target that resets a stream ends the caller's.
 */
import type { OutgoingHttpHeaders } from "node:http";
import http2 from "node:http2";
import { pipeline } from "node:stream";
import type { TLSSocket } from "node:tls";
import { upstreamFailure } from "../failure.ts";
import { connectionTokens, endToEnd, requestFields } from "../headers.ts";
import type { Handler, ProxyRequest, ProxyResponse, Upstream } from "../types.ts";

export interface H2Options {
  target: URL;
  /**
   * The session to the target for this request's caller connection: made on first use and again after it
   * closed (GOAWAY, error, rotation).
   */
  session: (req: ProxyRequest) => http2.ClientHttp2Session;
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
        const headers = h2RequestFields(req);
        headers[":method"] = req.method;
        headers[":path"] = req.path;
        headers[":authority"] = authority;
        headers[":scheme"] = scheme;
        // The body decides when the stream ends (pipeline below), whatever the method.
        stream = o.session(req).request(headers, { endStream: false });
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
      let answered = false;
      const fail = (e: Error) => {
        if (answered) return;
        answered = true;
        resolve(upstreamFailure(o.target, e));
      };
      // Kept for the stream's life: an error after the answer ends the body, which the caller's side sees.
      stream.on("error", fail);
      // A stream closed before any answer (reset with NO_ERROR or CANCEL, the connection gone) has no error.
      stream.once("close", () => {
        req.signal.removeEventListener("abort", cancel);
        if (!answered)
          fail(new Error(`the stream closed before a response (code ${stream.rstCode ?? "none"})`));
      });
      // Trailers are kept until the caller's side asks for them: they may arrive before it does.
      let trailers: OutgoingHttpHeaders | undefined;
      let deliver: ((t: OutgoingHttpHeaders) => void) | undefined;
      stream.on("trailers", (t) => {
        trailers = endToEnd(t, false);
        deliver?.(trailers);
      });
      stream.once("response", (received, flags) => {
        if (answered) return;
        const headers = endToEnd(received, false);
        if ((flags & NGHTTP2_FLAG_END_STREAM) !== 0 && received["grpc-status"] !== undefined) {
          trailers = {};
          for (const f of GRPC_STATUS_FIELDS)
            if (headers[f] !== undefined) {
              trailers[f] = headers[f];
              delete headers[f];
            }
        }
        let upstream: Upstream | undefined;
        try {
          upstream = o.identify?.(stream.session?.socket as TLSSocket);
        } catch (e) {
          // The target's certificate expired (or its bundle changed) since the handshake.
          stream.close(NGHTTP2_CANCEL);
          fail(e as Error);
          return;
        }
        answered = true;
        resolve({
          status: Number(received[":status"] ?? 502),
          headers,
          body: stream,
          trailers: (listener) => {
            deliver = listener;
            if (trailers) listener(trailers);
          },
          ...(upstream ? { upstream } : {}),
        });
      });
      pipeline(req.body, stream, (e) => {
        if (e && !stream.destroyed) stream.close(NGHTTP2_CANCEL);
      });
    });
}

/** requestFields (headers.ts) without what HTTP/2 forbids: Host becomes :authority; HTTP2-Settings is HTTP/1.1's. */
export function h2RequestFields(req: ProxyRequest): OutgoingHttpHeaders {
  const headers = requestFields(req);
  delete headers.host;
  delete headers["http2-settings"];
  // The one TE value HTTP/2 allows, and which gRPC servers require.
  const te = req.headers.te;
  if (te !== undefined && connectionTokens([String(te)]).has("trailers")) headers.te = "trailers";
  return headers;
}
