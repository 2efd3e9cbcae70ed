/**
 * One HTTP exchange with the whole response read, for `svc curl` (which may also be told the head and
 * each piece of the body as they arrive). An https:// URL is SPIFFE mTLS with
 * the SVID of `source`: the server must present an X.509-SVID that chains to the bundle of its own trust
 * domain (no hostname check); its SPIFFE ID is returned. Connection failures are SvcError("network"); a
 * server certificate the TLS layer refuses (expired, another CA) is SvcError("statement"), as one the
 * identity check refuses.
 */
import http, { type IncomingHttpHeaders } from "node:http";
import https from "node:https";
import { SvcError } from "../errors.ts";
import type { Authorizer } from "../spiffe/authorizer.ts";
import type { SpiffeId } from "../spiffe/id.ts";
import type { SvidSource } from "../spiffe/x509-source.ts";
import { spiffeServerIdentity } from "./peer.ts";

export interface ExchangeRequest {
  method: string;
  headers: Record<string, string>;
  body?: Uint8Array;
  source?: SvidSource;
  /** Which server may answer (https://); any workload of its trust domain when not given. */
  authorize?: Authorizer;
  /** The longest wait for the next bytes (default 30 s). */
  timeoutMs?: number;
  /** A response body over this many bytes ends the exchange with SvcError("network"). */
  maxBodyBytes?: number;
  /** The whole exchange must end within this many milliseconds. */
  deadlineMs?: number;
  /**
   * Told the head before any of the body is read (the body waits until the promise settles); a throw ends
   * the exchange with that error.
   */
  onHead?: (head: Omit<ExchangeResponse, "body">) => Promise<void>;
  /** Each piece of the body as it arrives (it is also in the response's body). */
  onData?: (chunk: Buffer) => void;
}

/**
 * Response heads up to this size are read (Node's default is 16 KiB): a notary's statement and receipt
 * headers carry a pod's labels and annotations and the request's headers.
 */
const MAX_HEADER_BYTES = 1024 * 1024;

export interface ExchangeResponse {
  status: number;
  statusText: string;
  httpVersion: string;
  headers: IncomingHttpHeaders;
  rawHeaders: string[];
  body: Uint8Array;
  /** The server's SPIFFE ID (https:// only). */
  peer?: SpiffeId;
}

export function exchange(url: URL, o: ExchangeRequest): Promise<ExchangeResponse> {
  const tls = url.protocol === "https:";
  if (!tls && url.protocol !== "http:")
    throw new SvcError(
      "usage",
      `URL ${url.href}: scheme ${url.protocol} is not supported (use http:// or https://)`,
    );
  if (tls && !o.source) throw new SvcError("usage", "an https:// URL needs a Workload API for SPIFFE mTLS");
  const svid = o.source?.getX509Svid();
  // The server's SPIFFE ID, kept by the identity check (agent: false: one connection, one check).
  let peer: SpiffeId | undefined;
  const options: https.RequestOptions = {
    method: o.method,
    headers: { ...o.headers, ...(o.body ? { "content-length": String(o.body.length) } : {}) },
    agent: false,
    timeout: o.timeoutMs ?? 30_000,
    maxHeaderSize: MAX_HEADER_BYTES,
    ...(tls && svid && o.source
      ? {
          cert: svid.certPem,
          key: svid.keyPem,
          ca: o.source.bundles().pem(),
          checkServerIdentity: spiffeServerIdentity(o.source, o.authorize, (p) => {
            peer = p.id;
          }),
        }
      : {}),
  };
  return new Promise((resolve, reject) => {
    const deadline =
      o.deadlineMs === undefined
        ? undefined
        : setTimeout(
            () => req.destroy(new Error(`the exchange did not end within ${o.deadlineMs} ms`)),
            o.deadlineMs,
          );
    const req = (tls ? https : http).request(url, options, (res) => {
      const chunks: Buffer[] = [];
      let length = 0;
      const head = {
        status: res.statusCode ?? 0,
        statusText: res.statusMessage ?? "",
        httpVersion: res.httpVersion,
        headers: res.headers,
        rawHeaders: res.rawHeaders,
        ...(peer ? { peer } : {}),
      };
      let failed = false;
      if (o.onHead) {
        res.pause();
        o.onHead(head).then(
          () => res.resume(),
          (e) => {
            failed = true;
            clearTimeout(deadline);
            req.destroy();
            reject(e);
          },
        );
      }
      res.on("data", (c: Buffer) => {
        length += c.length;
        if (o.maxBodyBytes !== undefined && length > o.maxBodyBytes) {
          req.destroy(new Error(`the response body is larger than ${o.maxBodyBytes} bytes`));
          return;
        }
        chunks.push(c);
        o.onData?.(c);
      });
      res.on("error", (e) => {
        clearTimeout(deadline);
        reject(networkError(url, e));
      });
      res.on("end", () => {
        clearTimeout(deadline);
        if (!failed) resolve({ ...head, body: new Uint8Array(Buffer.concat(chunks)) });
      });
    });
    req.on("timeout", () => req.destroy(new Error(`no response within ${options.timeout} ms`)));
    req.on("error", (e) => {
      clearTimeout(deadline);
      reject(networkError(url, e));
    });
    req.end(o.body ? Buffer.from(o.body) : undefined);
  });
}

/** OpenSSL's names for a peer certificate it cannot verify. */
const UNTRUSTED_CERT =
  /^(CERT_|UNABLE_TO_|SELF_SIGNED_CERT|DEPTH_ZERO_SELF_SIGNED_CERT|INVALID_CA|PATH_LENGTH_EXCEEDED|INVALID_PURPOSE|ERR_TLS_CERT)/;

function networkError(url: URL, e: Error): SvcError {
  const code = (e as NodeJS.ErrnoException).code;
  if (e instanceof SvcError || (typeof code === "string" && UNTRUSTED_CERT.test(code)))
    return new SvcError(
      "statement",
      `workload statement verification failed: server ${url.host} is not a trusted SPIFFE workload: ${e instanceof SvcError ? e.message : `${code}: ${e.message}`}`,
    );
  const hint = code === "ECONNREFUSED" || code === "ECONNRESET" ? " (possibly a network policy)" : "";
  return new SvcError(
    "network",
    `network error: connection to ${url.host} failed: ${code ?? e.message}${hint}`,
  );
}
