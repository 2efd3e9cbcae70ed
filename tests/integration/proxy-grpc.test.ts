import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import { type DevApi, prodId as ID, onlyProd as only, startProdApis, tempDir } from "../support/dev-api.ts";
import { startHttp2Pair } from "../support/http2-pair.ts";
import { freePort } from "../support/net.ts";
import { stopAll } from "../support/proc.ts";
import { startSvcProxy } from "../support/proxy.ts";
import { waitUntil } from "../support/wait.ts";

/**
 * gRPC (grpc-js, a real client and server) through a client→server svc-proxy pair whose listeners set
 * `connection.http2`: h2c from the client to its proxy, HTTP/2 over SPIFFE mTLS between the proxies, h2c
 * to the gRPC server. Unary and the three streaming kinds, status and message, deadlines, cancellation,
 * 1 MiB messages, Svc-Peer-ID as metadata, and a target the client proxy does not allow.
 */
const dir = tempDir();
const apis: Record<string, DevApi> = {};
let server: grpc.Server;
let serverPort: number;

// Messages are raw bytes: no protobuf needed to exercise the transport.
const bytes = {
  requestSerialize: (b: Buffer) => b,
  requestDeserialize: (b: Buffer) => b,
  responseSerialize: (b: Buffer) => b,
  responseDeserialize: (b: Buffer) => b,
};
const SERVICE = {
  unary: { path: "/test.Echo/Unary", requestStream: false, responseStream: false, ...bytes },
  serverStream: { path: "/test.Echo/ServerStream", requestStream: false, responseStream: true, ...bytes },
  clientStream: { path: "/test.Echo/ClientStream", requestStream: true, responseStream: false, ...bytes },
  bidi: { path: "/test.Echo/Bidi", requestStream: true, responseStream: true, ...bytes },
} satisfies grpc.ServiceDefinition;
const Client = grpc.makeGenericClientConstructor(SERVICE, "Echo");
type EchoClient = grpc.Client & Record<keyof typeof SERVICE, (...args: unknown[]) => unknown>;

/** What the server saw of the last call's metadata. */
let lastPeer: string | undefined;
let lastForwardedFor: string | undefined;
let lastDummy: string | undefined;
let cancelled: () => void = () => {};

beforeAll(async () => {
  Object.assign(apis, await startProdApis(dir, ["web", "api", "db", "central"]));
  server = new grpc.Server();
  server.addService(SERVICE, {
    unary: (call: grpc.ServerUnaryCall<Buffer, Buffer>, done: grpc.sendUnaryData<Buffer>) => {
      lastPeer = call.metadata.get("svc-peer-id")[0] as string | undefined;
      lastForwardedFor = call.metadata.get("x-forwarded-for").join(", ");
      lastDummy = call.metadata.get("svc-dummy")[0] as string | undefined;
      const text = call.request.toString();
      if (text === "fail") done({ code: grpc.status.FAILED_PRECONDITION, details: "refused on purpose" });
      // "slow" is never answered: the caller's deadline ends it.
      else if (text !== "slow") done(null, call.request);
    },
    serverStream: (call: grpc.ServerWritableStream<Buffer, Buffer>) => {
      const n = Number(call.request.toString());
      for (let i = 0; i < n; i++) call.write(Buffer.from(`item ${i}`));
      call.end();
    },
    clientStream: (call: grpc.ServerReadableStream<Buffer, Buffer>, done: grpc.sendUnaryData<Buffer>) => {
      let total = 0;
      call.on("data", (b: Buffer) => {
        total += b.length;
      });
      call.on("end", () => done(null, Buffer.from(String(total))));
    },
    bidi: (call: grpc.ServerDuplexStream<Buffer, Buffer>) => {
      call.on("data", (b: Buffer) => {
        if (b.toString() === "hang") {
          call.on("cancelled", () => cancelled());
          call.write(Buffer.from("waiting"));
        } else call.write(Buffer.concat([Buffer.from("echo "), b]));
      });
      call.on("end", () => call.end());
    },
  });
  serverPort = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (e, port) =>
      e ? reject(e) : resolve(port),
    ),
  );
});
afterAll(async () => {
  await stopAll();
  server.forceShutdown();
});

const config = (sa: string, listener: Record<string, unknown>) => ({
  spiffe: { workload_socket_path: apis[sa]?.socket },
  metricsAddr: "0",
  listeners: [{ name: "grpc", connection: { http2: true }, ...listener }],
});

/** The pair (tests/support/http2-pair.ts) in front of the gRPC server, and a gRPC client of it. */
async function pair(o: Parameters<typeof startHttp2Pair>[2] = {}): Promise<EchoClient> {
  const { clientPort } = await startHttp2Pair(apis, serverPort, o);
  return new Client(`127.0.0.1:${clientPort}`, grpc.credentials.createInsecure()) as unknown as EchoClient;
}

const unary = (c: EchoClient, body: Buffer, options: grpc.CallOptions = {}) =>
  new Promise<{ value?: Buffer; error?: grpc.ServiceError }>((resolve) =>
    c.unary(body, new grpc.Metadata(), options, (error: grpc.ServiceError | null, value?: Buffer) =>
      resolve(error ? { error } : { value }),
    ),
  );

describe("gRPC through a client→server pair (connection.http2)", () => {
  let client: EchoClient;
  beforeAll(async () => {
    client = await pair();
  });
  afterAll(() => client.close());

  test("unary: the answer; Svc-Peer-ID and X-Forwarded-For reach the server as metadata", async () => {
    const metadata = new grpc.Metadata();
    metadata.set("svc-peer-id", "spiffe://evil/forged");
    const value = await new Promise<Buffer | undefined>((resolve, reject) =>
      client.unary(Buffer.from("hello"), metadata, (e: grpc.ServiceError | null, v?: Buffer) =>
        e ? reject(e) : resolve(v),
      ),
    );
    expect(value?.toString()).toBe("hello");
    // The caller's own Svc-Peer-ID never passes; each hop appends the address it was called from.
    expect(lastPeer).toBe(ID("web"));
    expect(lastForwardedFor).toBe("127.0.0.1, 127.0.0.1");
  });

  test("an error status and its message reach the caller", async () => {
    const { error } = await unary(client, Buffer.from("fail"));
    expect(error?.code).toBe(grpc.status.FAILED_PRECONDITION);
    expect(error?.details).toBe("refused on purpose");
  });

  test("1 MiB messages both ways", async () => {
    const big = Buffer.alloc(1 << 20, 7);
    const { value } = await unary(client, big);
    expect(value?.length).toBe(big.length);
    expect(value?.equals(big)).toBe(true);
  });

  test("server streaming", async () => {
    const items: string[] = [];
    const call = client.serverStream(Buffer.from("50")) as grpc.ClientReadableStream<Buffer>;
    call.on("data", (b: Buffer) => items.push(b.toString()));
    await new Promise<void>((resolve, reject) => {
      call.on("end", resolve);
      call.on("error", reject);
    });
    expect(items).toEqual(Array.from({ length: 50 }, (_, i) => `item ${i}`));
  });

  test("client streaming", async () => {
    const total = await new Promise<string>((resolve, reject) => {
      const call = client.clientStream((e: grpc.ServiceError | null, v?: Buffer) =>
        e ? reject(e) : resolve(String(v)),
      ) as grpc.ClientWritableStream<Buffer>;
      for (let i = 0; i < 100; i++) call.write(Buffer.alloc(1000));
      call.end();
    });
    expect(total).toBe("100000");
  });

  test("bidirectional streaming: each message answered while the call stays open", async () => {
    const call = client.bidi() as grpc.ClientDuplexStream<Buffer, Buffer>;
    const next = () =>
      new Promise<string>((resolve) => call.once("data", (b: Buffer) => resolve(b.toString())));
    for (const word of ["one", "two", "three"]) {
      const answer = next();
      call.write(Buffer.from(word));
      expect(await answer).toBe(`echo ${word}`);
    }
    call.end();
    await new Promise<void>((resolve) => call.on("end", resolve));
  });

  test("a deadline that expires ends the call with DEADLINE_EXCEEDED", async () => {
    const { error } = await unary(client, Buffer.from("slow"), { deadline: Date.now() + 300 });
    expect(error?.code).toBe(grpc.status.DEADLINE_EXCEEDED);
  });

  test("a call the client cancels is cancelled at the server", async () => {
    const atServer = new Promise<void>((resolve) => {
      cancelled = resolve;
    });
    const call = client.bidi() as grpc.ClientDuplexStream<Buffer, Buffer>;
    call.on("error", () => {});
    // The server answers "waiting" once it listens for the cancellation.
    const waiting = new Promise((resolve) => call.once("data", resolve));
    call.write(Buffer.from("hang"));
    await waiting;
    call.cancel();
    await atServer;
  });
});

test("through client→central→server: streams pass both hops, and the server sees the central proxy", async () => {
  const [sp, mp, cp] = [await freePort(), await freePort(), await freePort()];
  await startSvcProxy(
    config("api", {
      address: `127.0.0.1:${sp}`,
      mode: "server",
      target: { url: `http://127.0.0.1:${serverPort}` },
      source: { spiffe_ids: only("central") },
    }),
  );
  await startSvcProxy(
    config("central", {
      address: `127.0.0.1:${mp}`,
      mode: "central",
      target: { url: `https://127.0.0.1:${sp}`, spiffe_ids: only("api") },
      source: { spiffe_ids: only("web") },
    }),
  );
  await startSvcProxy(
    config("web", {
      address: `127.0.0.1:${cp}`,
      mode: "client",
      target: { url: `https://127.0.0.1:${mp}`, spiffe_ids: only("central") },
    }),
  );
  const client = new Client(`127.0.0.1:${cp}`, grpc.credentials.createInsecure()) as unknown as EchoClient;
  expect((await unary(client, Buffer.from("via central"))).value?.toString()).toBe("via central");
  expect(lastPeer).toBe(ID("central"));
  const items: string[] = [];
  const call = client.serverStream(Buffer.from("20")) as grpc.ClientReadableStream<Buffer>;
  call.on("data", (b: Buffer) => items.push(b.toString()));
  await new Promise<void>((resolve, reject) => {
    call.on("end", resolve);
    call.on("error", reject);
  });
  expect(items.length).toBe(20);
  const { error } = await unary(client, Buffer.from("fail"));
  expect(error?.details).toBe("refused on purpose");
  client.close();
});

test("the dummy middleware works on HTTP/2 exchanges, and each stream is one request in the metrics", async () => {
  const metricsPort = await freePort();
  const client = await pair({
    client: { middlewares: [{ type: "dummy", message: "seen" }] },
    metricsAddr: `127.0.0.1:${metricsPort}`,
  });
  for (let i = 0; i < 5; i++)
    expect((await unary(client, Buffer.from(`m${i}`))).value?.toString()).toBe(`m${i}`);
  client.close();
  expect(lastDummy).toBe("seen");
  // A request is counted when its stream closes at the proxy, which may come just after the caller's end.
  await waitUntil("five requests in /metrics", async () =>
    (await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text()).includes(
      'svc_proxy_http_requests_total{listener="grpc",code="200"} 5',
    ),
  );
});

test.each([
  ["a target the client proxy does not allow is not called", { clientAllows: only("db") }],
  ["a caller the server proxy does not allow is refused at the handshake", { serverAllows: only("db") }],
])("%s", async (_, allows) => {
  const client = await pair(allows);
  const { error } = await unary(client, Buffer.from("hello"));
  client.close();
  expect(error?.code).toBe(grpc.status.UNAVAILABLE);
  expect(error?.details).toContain("502");
});

test("svc-proxy -check refuses http2 on a listener with the openai middleware", async () => {
  const { validateConfig } = await import("../../proxy/config/validate.ts");
  expect(() =>
    validateConfig({
      spiffe: { workload_socket_path: join(dir, "x.sock") },
      listeners: [
        {
          name: "l",
          address: "127.0.0.1:1",
          mode: "client",
          target: { url: "https://127.0.0.1:2" },
          connection: { http2: true },
          middlewares: [{ type: "openai" }],
        },
      ],
    }),
  ).toThrow(/connection\.http2: the openai middleware reads whole bodies/);
});
