import { Database } from "bun:sqlite";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Server } from "node:http";
import { join } from "node:path";
import { waitForPort } from "../support/net.ts";
import { type Proc, stopAll } from "../support/proc.ts";
import { exactId, modelBehindApi, svcProxyAs, useTestbed, workload, workloadHome } from "./support.ts";
import { freePort } from "./testbed/process.ts";

/**
 * Crash-only notary: a notarizing proxy (pod web-0, openai + notary) killed with SIGKILL twenty times
 * while callers send signRequest requests through it. Every receipt a caller was given must be in the
 * database afterwards, and the database must pass `PRAGMA integrity_check`.
 */
const testbed = useTestbed();
let upstream: Server;
const ports = { api: 0, client: 0 };
let db: string;
let startNotary: () => Proc;
let notary: Proc;

beforeAll(async () => {
  const tb = testbed();
  for (const k of Object.keys(ports)) ports[k as keyof typeof ports] = await freePort();
  const home = workloadHome(tb, "web", "notary-kill-e2e");
  db = join(home.dir, "notary.db");
  upstream = await modelBehindApi(tb, ports.api);
  startNotary = () =>
    svcProxyAs(
      tb,
      "web",
      {
        notary: { enable: true, database: { path: db } },
        listeners: [
          {
            name: "to-api",
            address: `127.0.0.1:${ports.client}`,
            mode: "client",
            target: {
              url: `https://127.0.0.1:${ports.api}`,
              spiffe_ids: [exactId(workload(tb, "api").spiffeId)],
            },
            middlewares: [{ type: "openai" }],
          },
        ],
      },
      { KUBECONFIG: home.kubeconfig },
    );
  notary = startNotary();
  for (const p of Object.values(ports)) await waitForPort(p, 60_000);
}, 120_000);

afterAll(async () => {
  await stopAll();
  upstream.close();
});

describe("a notarizing proxy killed under load", () => {
  test("twenty SIGKILLs lose no receipt a caller was given, and the database stays intact", async () => {
    const acked: string[] = [];
    let failed = 0;
    let stop = false;
    const caller = async (n: number) => {
      for (let i = 0; !stop; i++) {
        try {
          const r = await fetch(`http://127.0.0.1:${ports.client}/v1/chat/completions`, {
            method: "POST",
            headers: { "content-type": "application/json", "svc-notarization-level": "signRequest" },
            body: JSON.stringify({ model: "test-model", messages: [{ role: "user", content: `${n}-${i}` }] }),
          });
          await r.arrayBuffer();
          const id = r.headers.get("svc-receipt-id");
          if (r.status === 200 && id) acked.push(id);
          else failed++;
        } catch {
          // The proxy is down or was killed mid-request: nothing was acknowledged.
          failed++;
          await Bun.sleep(20); // pacing while the proxy restarts, not synchronization
        }
      }
    };
    const callers = Array.from({ length: 4 }, (_, n) => caller(n));
    for (let kill = 0; kill < 20; kill++) {
      const before = acked.length;
      const deadline = Date.now() + 30_000;
      while (acked.length < before + 5 && Date.now() < deadline) await Bun.sleep(20);
      expect(acked.length).toBeGreaterThanOrEqual(before + 5);
      notary.proc.kill("SIGKILL");
      await notary.exited;
      notary = startNotary();
      await waitForPort(ports.client, 60_000);
    }
    stop = true;
    await Promise.all(callers);
    await notary.stop();
    const d = new Database(db, { readonly: true });
    try {
      expect(d.query("PRAGMA integrity_check").get()).toEqual({ integrity_check: "ok" });
      const stored = new Set(
        d
          .query<{ id: string }, []>("SELECT id FROM receipts")
          .all()
          .map((r) => r.id),
      );
      const lost = acked.filter((id) => !stored.has(id));
      console.log(
        `notary kill: ${acked.length} receipts acknowledged, ${failed} requests failed, ${lost.length} lost`,
      );
      expect(lost).toEqual([]);
    } finally {
      d.close();
    }
  }, 600_000);
});
