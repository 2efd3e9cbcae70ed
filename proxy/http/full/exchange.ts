/**
 * One HTTP exchange on the full path (docs/proxy-http.md): the caller's identity checked (and a request
 * after its certificate expired not served), the read and write timeouts (proxy/timeouts.ts), the
 * middleware chain and the forwarder, the answer written, and the exchange counted and logged.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import http2 from "node:http2";
import { Transform } from "node:stream";
import { isSvcError, SvcError } from "../../../lib/errors.ts";
import type { SpiffeId } from "../../../lib/spiffe/id.ts";
import type { VerifiedPeer } from "../../../lib/spiffe/x509svid.ts";
import type { ListenerConfig } from "../../config/types.ts";
import { callerRefused, type ListenerEvents } from "../../listener.ts";
import type { Logger } from "../../log.ts";
import { requestTimedOut, targetTimedOut } from "../../timeouts.ts";
import { CALLER_CLOSED } from "../cancelled.ts";
import { countRefusal } from "../failure.ts";
import { namedBy, REQUEST_ID_HEADER, requestId } from "../headers.ts";
import {
  CallerStalled,
  type Handler,
  isBuffered,
  type ProxyRequest,
  type ProxyResponse,
  proxyResponse,
} from "../types.ts";
import type { Connections } from "./connections.ts";
import { send } from "./send.ts";

/** What every exchange of one listener shares. */
export interface ExchangeContext {
  l: ListenerConfig;
  log: Logger;
  events: ListenerEvents | undefined;
  connections: Connections;
  /** The middlewares, then the forwarder. */
  chain: Handler;
  /** The caller's verified identity (server and central modes); throws when it is not accepted. */
  peerFor(req: IncomingMessage, session: object | undefined): VerifiedPeer | undefined;
  /** Told of each request its caller cancelled (cancellationReport). */
  cancelled(): void;
}

// A request that arrives after the caller's certificate expired is not served: its connection is closed
// (HTTP/1.1) or the stream refused and the session closed (HTTP/2), as a server closes an idle
// connection, and the caller retries over a new handshake.
const expired = (peer: VerifiedPeer | undefined) =>
  peer !== undefined && Date.now() > peer.notAfter.getTime();

export async function serveExchange(
  x: ExchangeContext,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const { l, log, events, connections, chain, peerFor } = x;
  /** The caller ended the exchange (reset its stream, closed its connection) before the answer was done. */
  let gone = false;
  /** The target broke off its answer (its body failed): the proxy ended the caller's, not the caller. */
  let broken = false;
  const started = performance.now();
  const socket = req.socket;
  const session =
    req.httpVersionMajor === 2
      ? (req as unknown as { stream: { session: object } }).stream.session
      : undefined;
  const connection = session ?? socket;
  connections.requestStarted(connection);
  // A body not read to its end (an answer before it) leaves the connection to the idle timeout only.
  if (req.complete) connections.requestRead(connection);
  else req.once("end", () => connections.requestRead(connection));
  let verified: VerifiedPeer | undefined;
  try {
    verified = peerFor(req, session);
  } catch (e) {
    const refusal = isSvcError(e) ? e : new SvcError("untrusted_peer", (e as Error).message);
    callerRefused({ events, log }, refusal, socket.remoteAddress);
    res.once("close", () => connections.requestEnded(connection));
    send(res, proxyResponse(403, `caller identity not accepted: ${(e as Error).message}`));
    return;
  }
  if (expired(verified)) {
    log.info("caller certificate expired; connection closed", { peer: verified?.id.uri });
    connections.requestEnded(connection);
    if (session) {
      (req as unknown as { stream: http2.ServerHttp2Stream }).stream.close(
        http2.constants.NGHTTP2_REFUSED_STREAM,
      );
      (session as http2.Http2Session).close();
    } else socket.destroy();
    return;
  }
  const peer: SpiffeId | undefined = verified?.id;
  const id = requestId(req.headers[REQUEST_ID_HEADER] as string | undefined, namedBy(req.headers));
  const reqLog = log.with({ request_id: id, ...(peer ? { peer: peer.uri } : {}) });
  const controller = new AbortController();
  let bytesIn = 0;
  const bytesOut = { n: 0 };
  // A body is counted in a Transform, not a "data" listener: that would start it flowing before a
  // middleware that awaits has passed the request on, and the bytes would be lost. A request that
  // cannot have a body skips it (about 14% of a hop's throughput, measured).
  const mayHaveBody =
    req.httpVersionMajor === 2 ||
    req.headers["transfer-encoding"] !== undefined ||
    Number(req.headers["content-length"] ?? 0) > 0;
  const body = mayHaveBody
    ? req.pipe(
        new Transform({
          transform(chunk: Buffer, _encoding, done) {
            bytesIn += chunk.length;
            done(null, chunk);
          },
        }),
      )
    : req;
  let timedOut: "read" | "write" | undefined;

  // read: the whole request, body included; write: from the end of the request to the end of the response.
  const readTimer = setTimeout(() => {
    timedOut = "read";
    controller.abort();
    // The rest of a half-read request cannot be told from the next request: the connection ends.
    res.once("finish", () => socket.destroy());
    const t = requestTimedOut(l.timeouts);
    const timeout = proxyResponse(t.status, t.message);
    timeout.headers.connection = "close";
    if (!res.headersSent) send(res, timeout);
    else res.destroy();
  }, l.timeouts.readMs);
  let writeTimer: ReturnType<typeof setTimeout> | undefined;
  const startWriteTimer = () => {
    clearTimeout(readTimer);
    writeTimer = setTimeout(() => {
      timedOut = "write";
      controller.abort();
      const t = targetTimedOut(l.timeouts, l.target);
      if (!res.headersSent) send(res, proxyResponse(t.status, t.message));
      else res.destroy();
    }, l.timeouts.writeMs);
  };
  if (req.complete) startWriteTimer();
  else req.once("end", startWriteTimer);
  res.once("close", () => {
    clearTimeout(readTimer);
    clearTimeout(writeTimer);
    // Bun's HTTP/2 answers report writableFinished after the caller reset the stream, so an answer is done
    // only if it was also ended, and its request not aborted.
    const done = res.writableEnded && res.writableFinished && !req.aborted;
    if (!done) controller.abort();
    gone = !done && !timedOut && !broken;
    connections.requestEnded(connection);
    const seconds = (performance.now() - started) / 1000;
    const status = gone ? CALLER_CLOSED : res.statusCode;
    events?.request(status, seconds, bytesIn, bytesOut.n);
    if (gone) x.cancelled();
    reqLog.debug(gone ? "request cancelled by the caller" : "request", {
      method: req.method,
      path: req.url,
      status,
      seconds,
    });
  });

  // The request's fields as the caller sent them: the forwarder makes the one copy that goes upstream,
  // with the proxy's own fields (headers.ts requestFields).
  const headers = req.headers;
  const preq: ProxyRequest = {
    id,
    listener: l.name,
    method: req.method ?? "GET",
    path: req.url ?? "/",
    headers,
    body,
    peer,
    connection,
    remoteAddress: socket.remoteAddress ?? "",
    log: reqLog,
    signal: controller.signal,
  };
  let response: ProxyResponse;
  try {
    response = await chain(preq);
  } catch (e) {
    reqLog.error("middleware failed", { error: e as Error });
    response = proxyResponse(500, "internal error in a middleware");
  }
  if (timedOut || gone || res.headersSent || res.destroyed) {
    if (!isBuffered(response.body)) response.body.destroy();
    return;
  }
  if (response.failure) {
    const reason = String(response.body).trim();
    reqLog.warn("upstream failure", { status: response.status, failure: response.failure, reason });
    countRefusal(events, response);
  }
  // A response made without reading the whole request body (a refusal): the rest is read and dropped,
  // or the caller, still sending, would not see the response on this connection.
  if (!req.complete && !body.destroyed) body.resume();
  if (response.open) clearTimeout(writeTimer);
  if (!isBuffered(response.body))
    response.body.once("error", () => {
      broken = true;
    });
  send(res, response, bytesOut, (e) => {
    // A caller that went away mid-answer was logged above, and one that read nothing by whoever cut its
    // answer off; only a target that broke off is a failure.
    if (!gone && !(e instanceof CallerStalled))
      reqLog.warn("upstream failure", { failure: "response-interrupted", reason: e.message });
  });
}
