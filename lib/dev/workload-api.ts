/**
 * A development Workload API server: serves SVIDs from a DevCa for fixed SPIFFE IDs on a unix socket,
 * without attestation, and rotates them at half their lifetime. Development and tests only: any process
 * that can open the socket gets the identities. Production uses a SPIRE agent.
 */
import { lstatSync, mkdirSync, rmSync } from "node:fs";
import net from "node:net";
import { dirname } from "node:path";
import type { DescMethod } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { SvcError } from "../errors.ts";
import { SpiffeWorkloadAPI } from "../spiffe/gen/spiffe/workload/workload_pb.ts";
import { parseSpiffeId } from "../spiffe/id.ts";
import { JwtBundleSet, validateJwtSvid } from "../spiffe/jwt.ts";
import {
  empty,
  type JsonValue,
  jwtBundlesResponse,
  jwtSvidRequest,
  jwtSvidResponse,
  SERVICE,
  validateJwtSvidRequest,
  validateJwtSvidResponse,
  type X509SvidResponse,
  x509BundlesResponse,
  x509SvidResponse,
} from "../spiffe/workload-messages.ts";
import type { DevCa, Issued } from "./ca.ts";

export interface DevWorkloadApiOptions {
  socketPath: string;
  ca: DevCa;
  /** The first one is the default identity. */
  spiffeIds: string[];
  ttlMs: number;
  /** Other trust domains' CA certificates (DER) to hand out as federated bundles. */
  federated?: Map<string, Uint8Array>;
  log?: (message: string) => void;
}

type Stream = grpc.ServerWritableStream<unknown, unknown>;

// Paths and streaming kinds from the generated service descriptor; the bodies through workload-messages.
const method = (
  m: DescMethod,
  req: { decode(b: Uint8Array): unknown },
  res: { encode(v: never): Uint8Array },
) => ({
  path: `/${SERVICE}/${m.name}`,
  requestStream: false,
  responseStream: m.methodKind === "server_streaming",
  requestSerialize: (v: unknown) => Buffer.from(v as Uint8Array),
  requestDeserialize: (b: Buffer) => req.decode(b),
  responseSerialize: (v: unknown) => Buffer.from(res.encode(v as never)),
  responseDeserialize: (b: Buffer) => b,
});

const rpc = SpiffeWorkloadAPI.method;
const definition = {
  FetchX509SVID: method(rpc.fetchX509SVID, empty, x509SvidResponse),
  FetchX509Bundles: method(rpc.fetchX509Bundles, empty, x509BundlesResponse),
  FetchJWTSVID: method(rpc.fetchJWTSVID, jwtSvidRequest, jwtSvidResponse),
  FetchJWTBundles: method(rpc.fetchJWTBundles, empty, jwtBundlesResponse),
  ValidateJWTSVID: method(rpc.validateJWTSVID, validateJwtSvidRequest, validateJwtSvidResponse),
};

const securityHeaderMissing = {
  code: grpc.status.INVALID_ARGUMENT,
  details: "security header missing from request",
};
const hasSecurityHeader = (call: { metadata: grpc.Metadata }) =>
  call.metadata.get("workload.spiffe.io")[0] === "true";

export class DevWorkloadApi {
  private readonly server = new grpc.Server();
  private issued: Issued[] = [];
  private readonly x509Streams = new Set<Stream>();
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** Counts rotations, including the first issue. */
  generation = 0;
  /** The socket this server made, told apart from one made at the same path later. */
  private socketInode = -1;

  private constructor(private readonly o: DevWorkloadApiOptions) {
    for (const id of o.spiffeIds) parseSpiffeId(id);
  }

  static async start(options: DevWorkloadApiOptions): Promise<DevWorkloadApi> {
    const api = new DevWorkloadApi(options);
    // The path first: nothing is issued for a server that cannot listen.
    await claimSocketPath(options.socketPath);
    await api.rotate();
    await api.listen();
    return api;
  }

  private x509Response(): X509SvidResponse {
    const bundle = this.o.ca.caDer;
    return {
      svids: this.issued.map((s, i) => ({
        spiffeId: this.o.spiffeIds[i] as string,
        x509Svid: s.certDer,
        x509SvidKey: s.keyDer,
        bundle,
        hint: "",
      })),
      crl: [],
      federatedBundles: new Map(this.federatedEntries()),
    };
  }

  /** Federated bundles keyed by trust-domain ID, as the Workload API messages carry them. */
  private federatedEntries(): [string, Uint8Array][] {
    return [...(this.o.federated ?? [])].map(([td, der]) => [`spiffe://${td}`, der]);
  }

  private bundles(): Map<string, Uint8Array> {
    return new Map([[`spiffe://${this.o.ca.trustDomain}`, this.o.ca.caDer], ...this.federatedEntries()]);
  }

  /** Issues fresh SVIDs for every identity and pushes them to every open stream. */
  async rotate(): Promise<void> {
    this.issued = await Promise.all(this.o.spiffeIds.map((id) => this.o.ca.issueX509Svid(id, this.o.ttlMs)));
    this.generation++;
    const res = this.x509Response();
    for (const s of this.x509Streams) s.write(res);
    this.o.log?.(
      `issued X.509-SVID generation ${this.generation} for ${this.o.spiffeIds.join(", ")}, valid until ${this.issued[0]?.notAfter.toISOString()}`,
    );
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.rotate(), Math.max(100, this.o.ttlMs / 2));
  }

  private async listen(): Promise<void> {
    const jwtTtl = Math.max(this.o.ttlMs, 60_000);
    const stream = (register: (call: Stream) => void) => (call: Stream) => {
      // grpc-js ends a server stream with a status when the call emits an error object.
      if (!hasSecurityHeader(call)) return void call.emit("error", securityHeaderMissing);
      register(call);
    };
    this.server.addService(definition as unknown as grpc.ServiceDefinition, {
      FetchX509SVID: stream((call) => {
        this.x509Streams.add(call);
        call.on("cancelled", () => this.x509Streams.delete(call));
        call.on("close", () => this.x509Streams.delete(call));
        call.write(this.x509Response());
      }),
      FetchX509Bundles: stream((call) => call.write({ crl: [], bundles: this.bundles() })),
      FetchJWTBundles: stream((call) => {
        const jwks = new TextEncoder().encode(JSON.stringify(this.o.ca.jwks()));
        call.write({ bundles: new Map([[`spiffe://${this.o.ca.trustDomain}`, jwks]]) });
      }),
      FetchJWTSVID: (
        call: grpc.ServerUnaryCall<{ audience: string[]; spiffeId: string }, unknown>,
        cb: grpc.sendUnaryData<unknown>,
      ) => {
        if (!hasSecurityHeader(call)) return cb(securityHeaderMissing);
        const { audience, spiffeId } = call.request;
        if (audience.length === 0)
          return cb({ code: grpc.status.INVALID_ARGUMENT, details: "audience must be specified" });
        const ids = spiffeId ? [spiffeId] : this.o.spiffeIds.slice(0, 1);
        if (spiffeId && !this.o.spiffeIds.includes(spiffeId)) {
          return cb({ code: grpc.status.PERMISSION_DENIED, details: `no identity issued for ${spiffeId}` });
        }
        Promise.all(
          ids.map(async (id) => ({
            spiffeId: id,
            svid: await this.o.ca.signJwtSvid(id, audience, jwtTtl),
            hint: "",
          })),
        )
          .then((svids) => cb(null, { svids }))
          .catch((e) => cb({ code: grpc.status.INTERNAL, details: String(e) }));
      },
      ValidateJWTSVID: (
        call: grpc.ServerUnaryCall<{ audience: string; svid: string }, unknown>,
        cb: grpc.sendUnaryData<unknown>,
      ) => {
        if (!hasSecurityHeader(call)) return cb(securityHeaderMissing);
        const bundles = new JwtBundleSet([[this.o.ca.trustDomain, this.o.ca.jwks()]]);
        validateJwtSvid(call.request.svid, call.request.audience, bundles)
          .then((v) => cb(null, { spiffeId: v.id.uri, claims: v.claims as Record<string, JsonValue> }))
          .catch((e) => cb({ code: grpc.status.INVALID_ARGUMENT, details: (e as Error).message }));
      },
    });
    const path = this.o.socketPath;
    mkdirSync(dirname(path), { recursive: true });
    await new Promise<void>((resolve, reject) =>
      this.server.bindAsync(`unix://${path}`, grpc.ServerCredentials.createInsecure(), (e) =>
        e ? reject(e) : resolve(),
      ),
    );
    this.socketInode = lstatSync(path).ino;
  }

  async stop(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.server.forceShutdown();
    // Only our own socket: one another process made at the path since is theirs.
    try {
      if (lstatSync(this.o.socketPath).ino === this.socketInode) rmSync(this.o.socketPath);
    } catch {}
  }
}

/**
 * Makes `path` free to bind, as a listener finds an address: a socket something still serves is "address
 * already in use", anything else at the path is refused as well; only a socket nobody serves (left by a
 * process that died) is removed.
 */
async function claimSocketPath(path: string): Promise<void> {
  let isSocket: boolean;
  try {
    isSocket = lstatSync(path).isSocket();
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return;
    throw e;
  }
  if (!isSocket)
    throw new SvcError(
      "usage",
      `cannot listen on unix://${path}: it exists and is not a socket; choose another path`,
    );
  const served = await new Promise<boolean>((resolve) => {
    const probe = net.connect(path);
    probe.once("connect", () => {
      probe.destroy();
      resolve(true);
    });
    probe.once("error", () => resolve(false));
  });
  if (served)
    throw new SvcError(
      "usage",
      `cannot listen on unix://${path}: address already in use (another process serves it); stop it or choose another path`,
    );
  rmSync(path);
}
