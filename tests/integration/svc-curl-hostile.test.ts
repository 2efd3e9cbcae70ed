import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { createServer, type Server } from "node:https";
import { join } from "node:path";
import { DevCa } from "../../lib/dev/ca.ts";
import { derToPem } from "../../lib/spiffe/cert.ts";
import { type DevApi, startDevApi, tempDir } from "../support/dev-api.ts";
import { BUN, ROOT, runToEnd } from "../support/proc.ts";

/**
 * `svc curl` against servers that lie or flood (docs/svc-curl.md, "Limits"): a server whose certificate
 * comes from another CA of the trust domain is not a trusted workload (exit 2, not a network error); a
 * body past the limit, or an endless statement, ends the call instead of filling memory; a statement
 * header larger than Node's 16 KiB default is read and checked.
 */
const dir = tempDir("svc-curl-hostile-");
const ENDLESS = Buffer.alloc(1024 * 1024, "x");
/** Writes megabyte after megabyte until the client goes away. */
function endless(res: {
  write(b: Buffer): boolean;
  once(e: string, f: () => void): void;
  destroyed?: boolean;
}) {
  const more = () => {
    while (!res.destroyed && res.write(ENDLESS)) {}
    if (!res.destroyed) res.once("drain", more);
  };
  more();
}
const ID = "A".repeat(43);
const plain = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch: (req) => {
    const path = new URL(req.url).pathname;
    if (path === "/big-header")
      return new Response("hello\n", {
        headers: { "svc-workload-id": ID, "svc-workload-statement": `${"x".repeat(40_000)}.y.z` },
      });
    return new Response("?", { status: 404 });
  },
});
let flood: import("node:http").Server;
let rogue: Server;
let api: DevApi;

beforeAll(async () => {
  api = await startDevApi({
    socketPath: join(dir, "api.sock"),
    spiffeIds: ["spiffe://example.org/ns/a/sa/caller"],
    caDir: join(dir, "ca"),
  });
  // A server with an SVID of the right trust domain from a CA the bundle does not hold.
  const other = await DevCa.open("example.org");
  const svid = await other.issueX509Svid("spiffe://example.org/ns/a/sa/server", 3_600_000);
  rogue = createServer(
    { cert: derToPem(svid.certDer), key: derToPem(svid.keyDer, "PRIVATE KEY") },
    (_req, res) => res.end("hello\n"),
  );
  flood = (await import("node:http")).createServer((req, res) => {
    res.writeHead(200, { "content-type": "text/plain", "svc-workload-id": ID });
    // The answer itself, or the statement fetched for it, never ends.
    if (req.url === "/endless" || req.url === `/.svc/workload/${ID}`) endless(res);
    else res.end("hello\n");
  });
  await Promise.all([
    new Promise<void>((r) => rogue.listen(0, "127.0.0.1", () => r())),
    new Promise<void>((r) => flood.listen(0, "127.0.0.1", () => r())),
  ]);
});
afterAll(async () => {
  plain.stop(true);
  rogue?.close();
  flood?.closeAllConnections();
  flood?.close();
  await api?.proc.stop();
  rmSync(dir, { recursive: true, force: true });
});

const curl = (args: string[]) =>
  runToEnd([BUN, "cmd/svc.ts", "curl", "--spiffe-socket-path", api.socket, ...args], { cwd: ROOT });
const port = (s: { address(): unknown }) => (s.address() as { port: number }).port;

describe("svc curl against hostile servers", () => {
  test("a server certificate from another CA is an untrusted workload (exit 2), also with --validate=false", async () => {
    for (const validate of ["true", "false"]) {
      const r = await curl([`--validate=${validate}`, `https://127.0.0.1:${port(rogue)}/`]);
      expect(r.code).toBe(2);
      expect(r.out).toBe("");
      expect(r.err).toStartWith(
        `svc: workload statement verification failed: server 127.0.0.1:${port(rogue)} is not a trusted SPIFFE workload: `,
      );
    }
  });

  test("a body past 64 MiB ends the call (exit 1) instead of filling memory", async () => {
    const r = await curl([`http://127.0.0.1:${port(flood)}/endless`]);
    expect(r.code).toBe(1);
    expect(r.out).toBe("");
    expect(r.err).toContain("the response body is larger than 67108864 bytes");
  });

  test("an endless statement from /.svc/workload/{id} ends the call at 4 MiB", async () => {
    const r = await curl([`http://127.0.0.1:${port(flood)}/`]);
    expect(r.code).toBe(1);
    expect(r.out).toBe("");
    expect(r.err).toContain("the response body is larger than 4194304 bytes");
  });

  test("an empty --notary-id (an unset shell variable) is a usage error, not a pin that matches anyone", async () => {
    const r = await curl(["--notary-id", "", `http://127.0.0.1:${plain.port}/big-header`]);
    expect(r.code).toBe(1);
    expect(r.err).toStartWith("svc: --notary-id: an empty pattern would match every issuer");
  });

  test("a statement header over 16 KiB is read and checked (exit 2 for this one), not a parser error", async () => {
    const r = await curl([`http://127.0.0.1:${plain.port}/big-header`]);
    expect(r.code).toBe(2);
    expect(r.err).toStartWith("svc: workload statement verification failed:");
    expect(r.err).not.toContain("HPE_HEADER_OVERFLOW");
  });
});
