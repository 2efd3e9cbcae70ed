import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { waitForPort } from "../support/net.ts";
import { type Proc, stopAll } from "../support/proc.ts";
import { type DigestServer, sendAndDigest, startDigestServer } from "../support/tcp-peers.ts";
import { exactId, svcProxyAs, useTestbed, workload } from "./support.ts";
import { freePort } from "./testbed/process.ts";

/** TCP through a client → server pair of svc-proxy processes holding SPIRE-issued pod identities. */
const testbed = useTestbed();
let target: DigestServer;
beforeAll(async () => {
  target = await startDigestServer();
});
afterAll(async () => {
  await stopAll();
  target.server.close();
});

function svcProxy(as: string, listener: Record<string, unknown>): Proc {
  return svcProxyAs(testbed(), as, { listeners: [{ name: "tcp", protocol: "tcp", ...listener }] });
}

describe("svc-proxy TCP with SPIRE identities", () => {
  test("1 GiB through a client → server pair arrives intact, checksummed end to end", async () => {
    const tb = testbed();
    const [web, api] = [workload(tb, "web"), workload(tb, "api")];
    const [serverPort, clientPort] = [await freePort(), await freePort()];
    svcProxy("api", {
      address: `127.0.0.1:${serverPort}`,
      mode: "server",
      target: { url: `tcp://127.0.0.1:${target.port}` },
      source: { spiffe_ids: [exactId(web.spiffeId)] },
    });
    svcProxy("web", {
      address: `127.0.0.1:${clientPort}`,
      mode: "client",
      target: { url: `tls://127.0.0.1:${serverPort}`, spiffe_ids: [exactId(api.spiffeId)] },
    });
    for (const p of [serverPort, clientPort]) await waitForPort(p, 60_000);
    const r = await sendAndDigest(clientPort, 1024 * 1024 * 1024);
    expect(r.reply).toBe(r.sent);
    expect(r.reply).toEndWith(" 1073741824\n");
  }, 180_000);
});
