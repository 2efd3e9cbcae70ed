/**
 * A SPIFFE Workload API client over gRPC. Every call carries `workload.spiffe.io: true`. Streams
 * reconnect with exponential backoff on any error but InvalidArgument and Unimplemented (which are
 * reported and end the watch, as the Workload Endpoint spec's appendix A asks).
 */
import { existsSync, type FSWatcher, watch } from "node:fs";
import { basename, dirname } from "node:path";
import { SvcError } from "../errors.ts";
import { socketPath } from "./address.ts";
import { Backoff } from "./backoff.ts";
import { type Call, GrpcChannel, GrpcError } from "./grpc-channel.ts";
import {
  empty,
  type JwtBundlesResponse,
  type JwtSvidMessage,
  jwtBundlesResponse,
  jwtSvidRequest,
  jwtSvidResponse,
  SERVICE,
  type ValidateJwtSvidResponse,
  validateJwtSvidRequest,
  validateJwtSvidResponse,
  type X509BundlesResponse,
  type X509SvidResponse,
  x509BundlesResponse,
  x509SvidResponse,
} from "./workload-messages.ts";

export interface WatchHandlers<T> {
  onMessage(message: T): void;
  onError(error: SvcError, willRetry: boolean): void;
}

export interface Watch {
  cancel(): void;
}

const HEADERS = { "workload.spiffe.io": "true" };

/**
 * Calls `onCreated` once when the unix socket of `target` is (re)created in its directory; returns the
 * function that stops watching. Other targets, and directories that cannot be watched, are not watched:
 * the backoff alone applies.
 */
function onSocketCreated(target: string, onCreated: () => void): () => void {
  const path = socketPath(target.replace(/^unix:(?!\/\/)/, "unix://"));
  if (!path) return () => {};
  let watcher: FSWatcher | undefined;
  try {
    watcher = watch(dirname(path), (_event, name) => {
      if (name !== basename(path) || !existsSync(path)) return;
      watcher?.close();
      onCreated();
    });
    watcher.on("error", () => watcher?.close());
  } catch {
    return () => {};
  }
  return () => watcher?.close();
}

export class WorkloadApiClient {
  private readonly channel: GrpcChannel;

  constructor(
    readonly target: string,
    private readonly backoff: () => Backoff = () => new Backoff(),
  ) {
    this.channel = new GrpcChannel(target, HEADERS);
  }

  private describe(method: string, e: GrpcError): SvcError {
    return new SvcError(
      "workload_api",
      `Workload API ${method} at ${this.target} failed (${e.status}): ${e.details}`,
    );
  }

  private watch<T>(method: string, decode: (b: Uint8Array) => T, h: WatchHandlers<T>): Watch {
    let cancelled = false;
    let call: Call | undefined;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const backoff = this.backoff();
    // After the agent's socket reappears: a fresh default backoff (200 ms up), since the agent may take a
    // moment to listen on the socket it just created.
    let comeback: Backoff | undefined;
    let unwatch = () => {};
    const watchSocket = (target: string, onCreated: () => void) => {
      unwatch();
      unwatch = onSocketCreated(target, onCreated);
    };
    const start = () => {
      timer = undefined;
      unwatch();
      if (cancelled) return;
      let received = false;
      let malformed: SvcError | undefined;
      call = this.channel.call(`/${SERVICE}/${method}`, empty.encode(), {
        message: (b) => {
          if (malformed) return;
          let m: T;
          try {
            m = decode(b);
          } catch (e) {
            // A message we cannot read: drop the stream and reconnect after the backoff.
            malformed = this.malformed(method, e);
            received = false;
            return call?.cancel();
          }
          received = true;
          backoff.reset();
          comeback = undefined;
          h.onMessage(m);
        },
        end: (e) => {
          if (cancelled) return;
          if (e && !malformed && (e.status === "INVALID_ARGUMENT" || e.status === "UNIMPLEMENTED")) {
            return void h.onError(this.describe(method, e), false);
          }
          // The server ended the stream or it failed: reconnect (at once if it had been serving us).
          const error =
            malformed ??
            (e
              ? this.describe(method, e)
              : new SvcError("workload_api", `Workload API ${method} stream ended by ${this.target}`));
          h.onError(error, true);
          timer = setTimeout(start, received ? 0 : (comeback ?? backoff).delay());
          // A unix socket that is created again (the agent restarted) is tried at once, not after the
          // rest of the backoff: the SVID is back as soon as the agent is.
          watchSocket(this.target, () => {
            if (cancelled || !timer) return;
            clearTimeout(timer);
            backoff.reset();
            comeback = new Backoff();
            start();
          });
        },
      });
    };
    start();
    return {
      cancel() {
        cancelled = true;
        if (timer) clearTimeout(timer);
        unwatch();
        call?.cancel();
      },
    };
  }

  watchX509Context(h: WatchHandlers<X509SvidResponse>): Watch {
    return this.watch("FetchX509SVID", x509SvidResponse.decode, h);
  }

  private async unary<Req, Res>(
    method: string,
    encode: (r: Req) => Uint8Array,
    decode: (b: Uint8Array) => Res,
    req: Req,
    timeoutMs: number,
  ): Promise<Res> {
    let body: Uint8Array;
    try {
      body = await this.channel.unary(`/${SERVICE}/${method}`, encode(req), timeoutMs);
    } catch (e) {
      throw e instanceof GrpcError ? this.describe(method, e) : e;
    }
    return this.decoded(method, decode, body);
  }

  private malformed(method: string, e: unknown): SvcError {
    return new SvcError(
      "workload_api",
      `Workload API ${method} at ${this.target} sent a malformed message: ${(e as Error).message}`,
    );
  }

  private decoded<T>(method: string, decode: (b: Uint8Array) => T, body: Uint8Array): T {
    try {
      return decode(body);
    } catch (e) {
      throw this.malformed(method, e);
    }
  }

  async fetchJwtSvids(audience: string[], spiffeId = "", timeoutMs = 10_000): Promise<JwtSvidMessage[]> {
    if (audience.length === 0) throw new SvcError("usage", "a JWT-SVID needs at least one audience");
    const res = await this.unary(
      "FetchJWTSVID",
      jwtSvidRequest.encode,
      jwtSvidResponse.decode,
      { audience, spiffeId },
      timeoutMs,
    );
    if (res.svids.length === 0)
      throw new SvcError("workload_api", `Workload API at ${this.target} returned no JWT-SVID`);
    return res.svids;
  }

  /** The first JWT bundles message of the stream. */
  fetchJwtBundles(timeoutMs = 10_000): Promise<JwtBundlesResponse> {
    return this.first("FetchJWTBundles", jwtBundlesResponse.decode, timeoutMs);
  }

  fetchX509Bundles(timeoutMs = 10_000): Promise<X509BundlesResponse> {
    return this.first("FetchX509Bundles", x509BundlesResponse.decode, timeoutMs);
  }

  private first<T>(method: string, decode: (b: Uint8Array) => T, timeoutMs: number): Promise<T> {
    return new Promise((resolve, reject) => {
      let got = false;
      const call = this.channel.call(
        `/${SERVICE}/${method}`,
        empty.encode(),
        {
          message: (b) => {
            if (got) return;
            got = true;
            call.cancel();
            try {
              resolve(this.decoded(method, decode, b));
            } catch (e) {
              reject(e);
            }
          },
          end: (e) => {
            if (got) return;
            reject(
              e
                ? this.describe(method, e)
                : new SvcError(
                    "workload_api",
                    `Workload API ${method} at ${this.target} ended the stream without a message`,
                  ),
            );
          },
        },
        timeoutMs,
      );
    });
  }

  validateJwtSvid(svid: string, audience: string, timeoutMs = 10_000): Promise<ValidateJwtSvidResponse> {
    return this.unary(
      "ValidateJWTSVID",
      validateJwtSvidRequest.encode,
      validateJwtSvidResponse.decode,
      { svid, audience },
      timeoutMs,
    );
  }

  close(): void {
    this.channel.close();
  }
}
