import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createSecureServer } from "node:http2";
import { request } from "node:https";
import { join } from "node:path";
import { authorizeMatching } from "../../lib/spiffe/authorizer.ts";
import { X509Source } from "../../lib/spiffe/x509-source.ts";
import { attachSpiffeAuth, mtlsServerOptions } from "../../lib/tls/mtls.ts";
import { createUpstreamAgent } from "../../lib/tls/upstream-agent.ts";
import { type DevApi, startDevApi, tempDir } from "../support/dev-api.ts";
import { stopAll } from "../support/proc.ts";
import { waitUntil } from "../support/wait.ts";

/** The upstream agent across SVID rotations: requests keep working and retired agents do not pile up. */
const dir = tempDir();
let dev: DevApi;
let source: X509Source;
beforeAll(async () => {
  dev = await startDevApi({
    socketPath: join(dir, "agent.sock"),
    spiffeIds: ["spiffe://example.org/ns/prod/sa/web"],
    caDir: join(dir, "ca"),
    ttl: "2s",
  });
  source = await X509Source.open({ address: dev.socket });
});
afterAll(async () => {
  source.close();
  await stopAll();
});

describe("upstream agent", () => {
  test("rotations replace the agent; retired agents are released once idle, so they do not pile up", async () => {
    const policy = { source, authorize: authorizeMatching([]) };
    // node:http2 with HTTP/1.1 allowed: the Bun server that shows the client certificate (as the listeners).
    const server = createSecureServer({ ...mtlsServerOptions(policy), allowHTTP1: true }, (_req, res) =>
      res.end("ok"),
    );
    const detach = attachSpiffeAuth(server, policy, {}); // the server rotates too
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
    const port = (server.address() as { port: number }).port;
    const upstream = createUpstreamAgent(policy, { keepAlive: true });
    const get = () =>
      new Promise<string>((resolve, reject) => {
        request({ host: "127.0.0.1", port, path: "/", agent: upstream.agent() }, (res) => {
          let body = "";
          res.on("data", (d) => {
            body += d;
          });
          res.on("end", () => resolve(body));
        })
          .on("error", reject)
          .end();
      });
    const agents = new Set();
    let rotations = 0;
    source.onUpdate(() => rotations++);
    const nextRotation = () =>
      new Promise<void>((resolve) => {
        const off = source.onUpdate(() => {
          off();
          resolve();
        });
      });
    // A request after each of three rotations: each goes through the agent of the SVID then in force.
    for (let i = 0; i < 3; i++) {
      await nextRotation();
      agents.add(upstream.agent());
      expect(await get()).toBe("ok");
    }
    expect(agents.size).toBeGreaterThanOrEqual(3);
    // Rotation goes on (every second) while the sweep (every 5 s) releases idle retired agents: their
    // number comes back down instead of growing by one per rotation.
    await waitUntil(
      "retired agents released after 8 rotations",
      () => rotations >= 8 && upstream.retired() <= 2,
      25_000,
    );
    upstream.close();
    detach();
    server.close();
  }, 30_000);
});
