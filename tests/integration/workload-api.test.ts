import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import { isSvcError } from "../../lib/errors.ts";
import { Backoff } from "../../lib/spiffe/backoff.ts";
import { JwtBundleSet, validateJwtSvid } from "../../lib/spiffe/jwt.ts";
import { WorkloadApiClient } from "../../lib/spiffe/workload-client.ts";
import { X509Source } from "../../lib/spiffe/x509-source.ts";
import { type DevApi, startDevApi, tempDir } from "../support/dev-api.ts";
import { stopAll } from "../support/proc.ts";
import { waitUntil } from "../support/wait.ts";

const dir = tempDir();
const caDir = join(dir, "ca");
const WEB = "spiffe://example.org/ns/prod/sa/web";
const ADMIN = "spiffe://example.org/ns/prod/sa/admin";
let dev: DevApi;

beforeAll(async () => {
  dev = await startDevApi({ socketPath: join(dir, "agent.sock"), spiffeIds: [WEB, ADMIN], caDir, ttl: "4s" });
});
afterAll(stopAll);

// Awaits a rejection explicitly: under bun test, handing a pending gRPC call to expect().rejects
// left its response unprocessed until the deadline (seen with Bun 1.4.5), while awaiting it works.
async function errorOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    return (e as Error).message;
  }
  return "no error";
}

const nextUpdate = (source: X509Source, timeoutMs: number) =>
  new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no SVID update within ${timeoutMs} ms`)), timeoutMs);
    const off = source.onUpdate(() => {
      clearTimeout(timer);
      off();
      resolve();
    });
  });

describe("Workload API client against the development server process", () => {
  test("X509Source: default SVID first, every SVID, and the bundle", async () => {
    const source = await X509Source.open({ address: dev.socket });
    expect(source.getX509Svid().id.uri).toBe(WEB);
    expect(source.svids().map((s) => s.id.uri)).toEqual([WEB, ADMIN]);
    expect(source.bundles().trustDomains()).toEqual(["example.org"]);
    expect(source.getX509Bundle("example.org")?.authorities).toHaveLength(1);
    source.close();
    expect(() => source.getX509Svid()).toThrow(/no SVID yet or is closed/);
  });

  test("SPIFFE_ENDPOINT_SOCKET is used when no address is given", async () => {
    const before = process.env.SPIFFE_ENDPOINT_SOCKET;
    process.env.SPIFFE_ENDPOINT_SOCKET = dev.socket;
    try {
      const source = await X509Source.open();
      expect(source.getX509Svid().id.uri).toBe(WEB);
      source.close();
    } finally {
      if (before === undefined) delete process.env.SPIFFE_ENDPOINT_SOCKET;
      else process.env.SPIFFE_ENDPOINT_SOCKET = before;
    }
  });

  test("rotation is pushed: a new certificate replaces the old one atomically", async () => {
    const source = await X509Source.open({ address: dev.socket });
    const first = source.getX509Svid();
    await nextUpdate(source, 10_000);
    const second = source.getX509Svid();
    expect(second.id.uri).toBe(WEB);
    expect(second.chain[0]?.native.serialNumber).not.toBe(first.chain[0]?.native.serialNumber);
    expect(second.notAfter.getTime()).toBeGreaterThan(first.notAfter.getTime());
    source.close();
  });

  test("a call without the workload.spiffe.io header is refused with InvalidArgument", async () => {
    const raw = new grpc.Client(dev.socket, grpc.credentials.createInsecure());
    const err = await new Promise<grpc.ServiceError>((resolve) => {
      const call = raw.makeServerStreamRequest(
        "/SpiffeWorkloadAPI/FetchX509SVID",
        () => Buffer.alloc(0),
        (b: Buffer) => b,
        {},
      );
      call.on("error", resolve);
      call.on("data", () => {});
    });
    expect(err.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(err.details).toBe("security header missing from request");
    raw.close();
  });

  test("JWT-SVIDs: fetch, validate locally against the JWT bundle, and through ValidateJWTSVID", async () => {
    const client = new WorkloadApiClient(dev.socket.replace("unix://", "unix:"));
    const [svid] = await client.fetchJwtSvids(["https://notary.example/receipt"]);
    expect(svid?.spiffeId).toBe(WEB);
    const [admin] = await client.fetchJwtSvids(["aud"], ADMIN);
    expect(admin?.spiffeId).toBe(ADMIN);
    const bundles = JwtBundleSet.fromWorkloadApi((await client.fetchJwtBundles()).bundles);
    const local = await validateJwtSvid(svid?.svid as string, "https://notary.example/receipt", bundles);
    expect(local.id.uri).toBe(WEB);
    const remote = await client.validateJwtSvid(svid?.svid as string, "https://notary.example/receipt");
    expect(remote.spiffeId).toBe(WEB);
    expect(remote.claims.aud).toEqual(["https://notary.example/receipt"]);
    expect(await errorOf(client.validateJwtSvid(svid?.svid as string, "someone-else"))).toMatch(
      /ValidateJWTSVID .* failed \(INVALID_ARGUMENT\): invalid JWT-SVID: unexpected "aud"/,
    );
    expect(await errorOf(client.fetchJwtSvids(["aud"], "spiffe://example.org/not-mine"))).toMatch(
      /FetchJWTSVID .* failed \(PERMISSION_DENIED\): no identity issued for spiffe:\/\/example.org\/not-mine/,
    );
    const x509Bundles = await client.fetchX509Bundles();
    expect([...x509Bundles.bundles.keys()]).toEqual(["spiffe://example.org"]);
    client.close();
  });

  test("when the agent goes away the source keeps its last SVID, then reconnects and picks up new ones", async () => {
    const sock = join(dir, "restart.sock");
    let agent = await startDevApi({ socketPath: sock, spiffeIds: [WEB], caDir, ttl: "30s" });
    const errors: string[] = [];
    const source = await X509Source.open({
      address: `unix://${sock}`,
      onError: (e) => errors.push(e.message),
    });
    const before = source.getX509Svid();
    await agent.proc.stop();
    await waitUntil(
      "the stream's failure reported",
      () => errors.some((e) => e.includes("UNAVAILABLE")),
      10_000,
    );
    expect(source.getX509Svid()).toBe(before);
    agent = await startDevApi({ socketPath: sock, spiffeIds: [WEB], caDir, ttl: "30s" });
    await nextUpdate(source, 20_000);
    expect(source.getX509Svid().chain[0]?.native.serialNumber).not.toBe(before.chain[0]?.native.serialNumber);
    source.close();
    await agent.proc.stop();
  }, 40_000);

  test("an agent that comes back is used at once: its socket appearing cuts the backoff short", async () => {
    const sock = join(dir, "comeback.sock");
    let agent = await startDevApi({ socketPath: sock, spiffeIds: [WEB], caDir, ttl: "1h" });
    // A backoff of a minute: without the socket watch, nothing would arrive within this test's bounds.
    const client = new WorkloadApiClient(`unix://${sock}`, () => new Backoff(60_000, 60_000));
    let messages = 0;
    let failures = 0;
    const watch = client.watchX509Context({
      onMessage: () => messages++,
      onError: () => failures++,
    });
    await waitUntil("the first SVID", () => messages === 1, 10_000);
    await agent.proc.stop();
    await waitUntil("the stream's failure", () => failures > 0, 10_000);
    agent = await startDevApi({ socketPath: sock, spiffeIds: [WEB], caDir, ttl: "1h" });
    await waitUntil("an SVID from the agent that came back", () => messages === 2, 20_000);
    watch.cancel();
    client.close();
    await agent.proc.stop();
  }, 40_000);

  test("no agent: open() fails after its timeout with the address and the last error", async () => {
    let error: unknown;
    try {
      await X509Source.open({ address: `unix://${join(dir, "nobody.sock")}`, timeoutMs: 1500 });
    } catch (e) {
      error = e;
    }
    expect(isSvcError(error, "workload_api")).toBe(true);
    expect((error as Error).message).toMatch(
      /^no X.509-SVID from the Workload API at unix:\/\/.*nobody\.sock within 1500 ms: .*UNAVAILABLE/,
    );
  });
});
