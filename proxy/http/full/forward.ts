/**
 * The end of every chain: sends the request to the target, streaming both bodies, and hands back the
 * target's response. Failures become a 502 with a short body that says which failure; an abort (the
 * caller left, or the write timeout fired) ends the upstream request.
 */
import http from "node:http";
import https from "node:https";
import { isIP } from "node:net";
import type { TLSSocket } from "node:tls";
import { socketHost } from "../../../lib/url-host.ts";
import { upstreamFailure } from "../failure.ts";
import { endToEnd, requestFields } from "../headers.ts";
import type { Handler, ProxyResponse, Upstream } from "../types.ts";

export interface ForwardOptions {
  target: URL;
  agent: () => http.Agent;
  /** For SPIFFE mTLS targets: who answered, from the connection the response came on. */
  identify?: (socket: TLSSocket) => Upstream | undefined;
}

export function forwarder(o: ForwardOptions): Handler {
  const tls = o.target.protocol === "https:";
  const port = Number(o.target.port) || (tls ? 443 : 80);
  const host = socketHost(o.target.hostname);
  return (req) =>
    new Promise<ProxyResponse>((resolve) => {
      const headers = requestFields(req);
      const out = (tls ? https : http).request(
        {
          host,
          port,
          method: req.method,
          path: req.path,
          headers,
          agent: o.agent(),
          signal: req.signal,
          ...(tls && !isIP(host) ? { servername: host } : {}),
        },
        (res) => {
          let upstream: Upstream | undefined;
          try {
            upstream = o.identify?.(res.socket as TLSSocket);
          } catch (e) {
            // The upstream's certificate expired (or its bundle changed) since the handshake: this
            // exchange ends with a 502; the process and other exchanges are untouched.
            res.destroy();
            resolve(upstreamFailure(o.target, e as Error));
            return;
          }
          resolve({
            status: res.statusCode ?? 502,
            headers: endToEnd(res.headers, false),
            body: res,
            ...(upstream ? { upstream } : {}),
          });
        },
      );
      out.on("error", (e) => resolve(upstreamFailure(o.target, e)));
      req.body.pipe(out);
    });
}
