import * as grpc from "@grpc/grpc-js";
import { SvcError } from "../errors.ts";
import { Backoff } from "./backoff.ts";
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

/**
 * A SPIFFE Workload API client over gRPC. Every call carries `workload.spiffe.io: true`. Streams
 * reconnect with exponential backoff on any error but InvalidArgument and Unimplemented (which are
 * reported and end the watch, as the Workload Endpoint spec's appendix A asks).
 */
export interface WatchHandlers<T> {
  onMessage(message: T): void;
  onError(error: SvcError, willRetry: boolean): void;
}

export interface Watch {
  cancel(): void;
}

const codec =
  <T>(c: { encode(v: T): Uint8Array }) =>
  (v: T) =>
    Buffer.from(c.encode(v));

export class WorkloadApiClient {
  private readonly client: grpc.Client;

  constructor(
    readonly target: string,
    private readonly backoff: () => Backoff = () => new Backoff(),
  ) {
    this.client = new grpc.Client(target, grpc.credentials.createInsecure());
  }

  private metadata(): grpc.Metadata {
    const m = new grpc.Metadata();
    m.set("workload.spiffe.io", "true");
    return m;
  }

  private describe(method: string, e: grpc.ServiceError | Error): SvcError {
    const code = "code" in e && typeof e.code === "number" ? grpc.status[e.code] : undefined;
    const detail = ("details" in e && e.details ? e.details : e.message).replace(
      /\. Resolution note: ?$/,
      "",
    );
    return new SvcError(
      "workload_api",
      `Workload API ${method} at ${this.target} failed${code ? ` (${code})` : ""}: ${detail}`,
    );
  }

  private watch<T>(method: string, decode: (b: Uint8Array) => T, h: WatchHandlers<T>): Watch {
    let cancelled = false;
    let call: grpc.ClientReadableStream<T> | undefined;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const backoff = this.backoff();
    const start = () => {
      if (cancelled) return;
      let received = false;
      let retried = false;
      const retry = (error: SvcError) => {
        if (retried || cancelled) return;
        retried = true;
        h.onError(error, true);
        timer = setTimeout(start, received ? 0 : backoff.delay());
      };
      call = this.client.makeServerStreamRequest(
        `/${SERVICE}/${method}`,
        codec(empty),
        (b: Buffer) => decode(b),
        {},
        this.metadata(),
      );
      call.on("data", (m: T) => {
        received = true;
        backoff.reset();
        h.onMessage(m);
      });
      call.on("error", (e: grpc.ServiceError) => {
        if (cancelled || e.code === grpc.status.CANCELLED) return;
        const err = this.describe(method, e);
        if (e.code === grpc.status.INVALID_ARGUMENT || e.code === grpc.status.UNIMPLEMENTED) {
          retried = true;
          h.onError(err, false);
          return;
        }
        retry(err);
      });
      // The server ended the stream: reconnect (immediately if it had been serving us).
      call.on("end", () =>
        retry(new SvcError("workload_api", `Workload API ${method} stream ended by ${this.target}`)),
      );
    };
    start();
    return {
      cancel() {
        cancelled = true;
        if (timer) clearTimeout(timer);
        call?.cancel();
      },
    };
  }

  watchX509Context(h: WatchHandlers<X509SvidResponse>): Watch {
    return this.watch("FetchX509SVID", x509SvidResponse.decode, h);
  }

  watchX509Bundles(h: WatchHandlers<X509BundlesResponse>): Watch {
    return this.watch("FetchX509Bundles", x509BundlesResponse.decode, h);
  }

  watchJwtBundles(h: WatchHandlers<JwtBundlesResponse>): Watch {
    return this.watch("FetchJWTBundles", jwtBundlesResponse.decode, h);
  }

  private unary<Req, Res>(
    method: string,
    encode: (r: Req) => Uint8Array,
    decode: (b: Uint8Array) => Res,
    req: Req,
    timeoutMs: number,
  ): Promise<Res> {
    return new Promise((resolve, reject) => {
      this.client.makeUnaryRequest(
        `/${SERVICE}/${method}`,
        (r: Req) => Buffer.from(encode(r)),
        (b: Buffer) => decode(b),
        req,
        this.metadata(),
        { deadline: Date.now() + timeoutMs },
        (e, res) =>
          e || !res ? reject(this.describe(method, e ?? new Error("empty response"))) : resolve(res),
      );
    });
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
      const call = this.client.makeServerStreamRequest(
        `/${SERVICE}/${method}`,
        codec(empty),
        (b: Buffer) => decode(b),
        {},
        this.metadata(),
        {
          deadline: Date.now() + timeoutMs,
        },
      );
      call.once("data", (m: T) => {
        resolve(m);
        call.cancel();
      });
      call.on("error", (e: grpc.ServiceError) => {
        if (e.code !== grpc.status.CANCELLED) reject(this.describe(method, e));
      });
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
    this.client.close();
  }
}
