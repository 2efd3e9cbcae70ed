import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Socket } from "bun";
import { DevCa } from "../../lib/dev/ca.ts";
import { authorizeMatching } from "../../lib/spiffe/authorizer.ts";
import { BundleSet, X509Bundle } from "../../lib/spiffe/bundle.ts";
import { parseCert } from "../../lib/spiffe/cert.ts";
import type { SvidSource } from "../../lib/spiffe/x509-source.ts";
import { parseX509Svid } from "../../lib/spiffe/x509svid.ts";
import { bunTlsOptions, verifyBunPeer } from "../../lib/tls/bun-peer.ts";
import { connectMtls, createMtlsServer, type MtlsServer } from "../../lib/tls/mtls.ts";
import { ia5, seq } from "../support/der-build.ts";

/**
 * SVIDs with an empty subject and a critical subject alternative name (RFC 5280 section 4.1.2.6) on both
 * sides of real handshakes: node:tls (createMtlsServer / connectMtls) and Bun's own sockets (the HTTP
 * relay's path, verifyBunPeer). Each side presents such an SVID as its own and accepts the other's.
 */
const anyone = authorizeMatching([]);
const SERVER = "spiffe://example.org/ns/test/sa/server";
const CLIENT = "spiffe://example.org/ns/test/sa/client";
let server: SvidSource;
let client: SvidSource;

async function source(ca: DevCa, id: string): Promise<SvidSource> {
  const issued = await ca.issue({
    uris: [],
    ttlMs: 600_000,
    subject: "",
    extra: [{ oid: "2.5.29.17", critical: true, value: seq(ia5(0x86, id)) }],
  });
  const svid = parseX509Svid(issued.certDer, issued.keyDer);
  const bundles = new BundleSet([new X509Bundle("example.org", [parseCert(ca.caDer)])]);
  return {
    getX509Svid: () => svid,
    getX509Bundle: (td: string) => bundles.getX509Bundle(td),
    bundles: () => bundles,
    onUpdate: () => () => {},
  };
}

beforeAll(async () => {
  const ca = await DevCa.open("example.org");
  [server, client] = await Promise.all([source(ca, SERVER), source(ca, CLIENT)]);
  expect(server.getX509Svid().chain[0]?.subject).toBe("");
});

describe("an empty subject with a critical SAN in real handshakes", () => {
  let mtls: MtlsServer | undefined;
  afterAll(() => mtls?.close());

  test("node:tls: both sides present one and accept the other's", async () => {
    let decided: (outcome: string) => void = () => {};
    const serverSaw = new Promise<string>((resolve) => {
      decided = resolve;
    });
    mtls = createMtlsServer(
      { source: server, authorize: anyone },
      {
        onConnection: (socket, peer) => {
          decided(peer.id.uri);
          socket.end();
        },
        onReject: (e) => decided(`refused: ${e.message}`),
      },
    );
    const s = mtls.server;
    await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
    const { socket, peer } = await connectMtls({
      host: "127.0.0.1",
      port: (s.address() as { port: number }).port,
      policy: { source: client, authorize: anyone },
    });
    expect(peer.id.uri).toBe(SERVER);
    const outcome = await serverSaw;
    socket.destroy();
    expect(outcome).toBe(CLIENT);
  });

  test("Bun sockets: both sides present one and accept the other's", async () => {
    const seen: Record<string, string> = {};
    let serverDone: () => void = () => {};
    const serverDecided = new Promise<void>((resolve) => {
      serverDone = resolve;
    });
    const listener = Bun.listen({
      hostname: "127.0.0.1",
      port: 0,
      tls: { ...bunTlsOptions(server), requestCert: true, rejectUnauthorized: false },
      socket: {
        handshake(socket) {
          try {
            seen.server = verifyBunPeer(socket as Socket<unknown>, "server", server, anyone).id.uri;
          } catch (e) {
            seen.server = `refused: ${(e as Error).message}`;
          }
          socket.end();
          serverDone();
        },
        data() {},
      },
    });
    try {
      await new Promise<void>((resolve, reject) => {
        Bun.connect({
          hostname: "127.0.0.1",
          port: listener.port,
          tls: { ...bunTlsOptions(client), rejectUnauthorized: false },
          socket: {
            handshake(socket) {
              try {
                seen.client = verifyBunPeer(socket as Socket<unknown>, "client", client, anyone).id.uri;
              } catch (e) {
                seen.client = `refused: ${(e as Error).message}`;
              }
              socket.end();
              resolve();
            },
            data() {},
            connectError: (_, e) => reject(e),
          },
        });
      });
      await serverDecided;
    } finally {
      listener.stop(true);
    }
    expect(seen).toEqual({ client: SERVER, server: CLIENT });
  });
});
