import { Database } from "bun:sqlite";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chownSync, copyFileSync, rmSync } from "node:fs";
import type { Server } from "node:http";
import { join } from "node:path";
import { compiled } from "../support/compiled.ts";
import { metricValue } from "../support/metrics.ts";
import { waitForPort } from "../support/net.ts";
import { type Proc, ROOT, runToEnd, stopAll } from "../support/proc.ts";
import { waitUntil } from "../support/wait.ts";
import { exactId, modelBehindApi, svcProxyAs, useTestbed, workload, workloadHome } from "./support.ts";
import { freePort } from "./testbed/process.ts";
import { asWorkload } from "./testbed/spire.ts";

/**
 * Witnesses end to end (docs/notary.md, "Witnesses"), all real processes on SPIRE identities: a notarizing
 * proxy (pod web-0, notary + openai + notary-query) pushing its checkpoints to two witnesses (svc-proxy's
 * witness role as pods intruder-0 and stale-0), and `svc curl` with a witness policy of 2. The notary's
 * database is cut (restored from an old backup) and the notary restarted: both witnesses refuse its next
 * checkpoint, log and count it, and svc curl refuses its receipts (exit 3). After the operators forget the
 * cut log, a second database under the notary's SPIFFE ID (a fork) is caught the same way. Last, faults
 * that are no one's fraud: a witness killed with SIGKILL again and again while the notary pushes, and
 * one down for a while. The tests run in order, each on the state the one before left.
 */
const testbed = useTestbed();
let upstream: Server;
const ports = { api: 0, client: 0, fork: 0, metrics: 0, wa: 0, wb: 0, waMetrics: 0, wbMetrics: 0 };
let home: { dir: string; kubeconfig: string };
let db: string;
let startNotary: (database: string, port: number, metrics?: number) => Proc;
let notary: Proc;
const witnesses: Record<"wa" | "wb", { proc: Proc; as: string; db: string; start: () => Proc }> = {} as never;

const chat = (content: string) =>
  JSON.stringify({ model: "test-model", messages: [{ role: "user", content }] });

beforeAll(async () => {
  const tb = testbed();
  for (const k of Object.keys(ports)) ports[k as keyof typeof ports] = await freePort();
  const web = workload(tb, "web");
  upstream = await modelBehindApi(tb, ports.api);
  for (const [key, as] of [
    ["wa", "intruder"],
    ["wb", "stale"],
  ] as const) {
    const dir = workloadHome(tb, as, `witness-${key}-e2e`).dir;
    const file = join(dir, "witness.db");
    for (const suffix of ["", "-wal", "-shm"]) rmSync(`${file}${suffix}`, { force: true });
    const start = () =>
      svcProxyAs(tb, as, {
        metricsAddr: `127.0.0.1:${ports[key === "wa" ? "waMetrics" : "wbMetrics"]}`,
        witness: { database: file, logs: [{ spiffe_id: web.spiffeId }] },
        listeners: [
          {
            name: "witness",
            address: `127.0.0.1:${ports[key]}`,
            mode: "server",
            // Nothing but the witness routes is served here.
            target: { url: "http://127.0.0.1:9" },
            source: { spiffe_ids: [exactId(web.spiffeId)] },
            middlewares: [{ type: "witness" }],
          },
        ],
      });
    witnesses[key] = { as, db: file, start, proc: start() };
  }
  home = workloadHome(tb, "web", "notary-witness-e2e");
  db = join(home.dir, "notary.db");
  for (const name of ["notary.db", "fork.db"])
    for (const suffix of ["", "-wal", "-shm"]) rmSync(join(home.dir, `${name}${suffix}`), { force: true });
  startNotary = (database, port, metrics) =>
    svcProxyAs(
      tb,
      "web",
      {
        ...(metrics ? { metricsAddr: `127.0.0.1:${metrics}` } : {}),
        notary: {
          enable: true,
          database: { path: database },
          witnesses: [
            { spiffe_id: workload(tb, "intruder").spiffeId, url: `https://127.0.0.1:${ports.wa}` },
            { spiffe_id: workload(tb, "stale").spiffeId, url: `https://127.0.0.1:${ports.wb}` },
          ],
          push_interval: "50ms",
        },
        listeners: [
          {
            name: "to-api",
            address: `127.0.0.1:${port}`,
            mode: "client",
            target: {
              url: `https://127.0.0.1:${ports.api}`,
              spiffe_ids: [exactId(workload(tb, "api").spiffeId)],
            },
            middlewares: [{ type: "notary-query" }, { type: "openai" }],
          },
        ],
      },
      { KUBECONFIG: home.kubeconfig },
    );
  notary = startNotary(db, ports.client, ports.metrics);
  for (const p of Object.values(ports)) if (p !== ports.fork) await waitForPort(p, 60_000);
}, 120_000);

afterAll(async () => {
  await stopAll();
  upstream.close();
});

/** Runs svc as workload `as` (web: it fetches bundles from the agent) and collects its output. */
async function svc(args: string[], as = "web") {
  const tb = testbed();
  const r = await runToEnd(asWorkload(workload(tb, as), [compiled("svc"), ...args]), {
    cwd: ROOT,
    env: { ...process.env, HOME: home.dir, SPIFFE_ENDPOINT_SOCKET: `unix://${tb.spire.agentSocket}` },
  });
  return { code: r.code, stdout: r.out, stderr: r.err };
}

/**
 * svc curl -n signRequest through the notary on `port`, with the witness policy of the workloads named
 * (both witnesses by default; none: no policy) and any `extra` flags.
 */
function signed(content: string, port: number, witnesses = ["intruder", "stale"], extra: string[] = []) {
  const tb = testbed();
  return svc([
    "curl",
    "-n",
    "signRequest",
    ...witnesses.flatMap((w) => ["--witness", workload(tb, w).spiffeId]),
    ...extra,
    "-d",
    chat(content),
    `http://127.0.0.1:${port}/v1/chat/completions`,
  ]);
}

/** The witness metric for the notary's log and `result` on a witness's metrics port. */
function witnessCount(port: number, result: string) {
  const web = workload(testbed(), "web").spiffeId;
  return metricValue(port, `svc_proxy_witness_checkpoints_total{log="${web}",result="${result}"}`);
}

describe("the notary log, witnessed", () => {
  test("svc curl with a witness policy of 2 verifies a receipt whose tree head both witnesses cosigned", async () => {
    const r = await signed("first", ports.client);
    expect(r.stderr).toContain("cosigned by");
    expect(r.code).toBe(0);
    const tb = testbed();
    for (const w of ["intruder", "stale"]) expect(r.stderr).toContain(workload(tb, w).spiffeId);
    expect(
      await metricValue(
        ports.metrics,
        `svc_proxy_notary_witness_pushes_total{witness="${workload(tb, "intruder").spiffeId}",result="cosigned"}`,
      ),
    ).toBeGreaterThan(0);
    // A threshold above the witnesses named is a usage error.
    const bad = await signed("threshold", ports.client, ["intruder"], ["--witness-threshold", "2"]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain("--witness-threshold");
  });

  test("a cut log (the database restored from an old backup, the notary restarted): both witnesses refuse its next checkpoint, log and count it; svc curl with the policy refuses its receipts (exit 3)", async () => {
    const backup = join(home.dir, "backup.db");
    rmSync(backup, { force: true });
    const d = new Database(db, { readonly: true });
    d.run(`VACUUM INTO '${backup}'`);
    d.close();
    chownSync(backup, workload(testbed(), "web").uid, workload(testbed(), "web").uid);
    // The log grows past the backup, and the witnesses hold that.
    for (const m of ["second", "third"]) expect((await signed(m, ports.client)).code).toBe(0);
    await notary.stop("SIGTERM");
    for (const suffix of ["-wal", "-shm"]) rmSync(`${db}${suffix}`, { force: true });
    copyFileSync(backup, db);
    chownSync(db, workload(testbed(), "web").uid, workload(testbed(), "web").uid);
    notary = startNotary(db, ports.client, ports.metrics);
    // The restarted notary pushes the log as it is at start: smaller than what the witnesses hold.
    for (const port of [ports.waMetrics, ports.wbMetrics])
      await waitUntil("a witness counting the cut", async () => (await witnessCount(port, "cut")) === 1);
    for (const w of Object.values(witnesses))
      expect(w.proc.stderr()).toContain(
        '"msg":"witness: checkpoint refused; the log is refused until an operator acts"',
      );
    await waitForPort(ports.client, 60_000);
    const r = await signed("after the cut", ports.client);
    expect(r.code).toBe(3);
    expect(r.stderr).toContain("witness check failed");
    // Without the policy the receipt verifies: it is the witnesses that catch the cut.
    expect((await signed("no policy", ports.client, [])).code).toBe(0);
    expect(notary.stderr()).toContain('"msg":"notary: a witness refused the checkpoint"');
    // Each witness kept the evidence.
    for (const w of Object.values(witnesses)) {
      const listed = await svc(["notary", "witness", "--database", w.db, "-o", "json"], w.as);
      expect(listed.code).toBe(0);
      const doc = JSON.parse(listed.stdout);
      expect(doc.logs[0].refused).toContain("it lost records");
      expect(doc.evidence).toHaveLength(1);
    }
  }, 180_000);

  test("after the operators forget the cut log, a second database under the notary's SPIFFE ID (a fork) is refused the same way", async () => {
    const web = workload(testbed(), "web").spiffeId;
    for (const w of Object.values(witnesses))
      expect((await svc(["notary", "witness", "--database", w.db, "--forget", web], w.as)).code).toBe(0);
    // The cut log is taken as new: its receipts are witnessed again.
    expect((await signed("accepted again", ports.client)).code).toBe(0);
    const fork = startNotary(join(home.dir, "fork.db"), ports.fork);
    await waitForPort(ports.fork, 60_000);
    const before = await Promise.all(
      [ports.waMetrics, ports.wbMetrics].map(
        async (p) => (await witnessCount(p, "cut")) + (await witnessCount(p, "inconsistent")),
      ),
    );
    const r = await signed("from the fork", ports.fork);
    expect(r.code).toBe(3);
    expect(r.stderr).toContain("witness check failed");
    const after = await Promise.all(
      [ports.waMetrics, ports.wbMetrics].map(
        async (p) => (await witnessCount(p, "cut")) + (await witnessCount(p, "inconsistent")),
      ),
    );
    expect(after.map((n, i) => n - (before[i] as number))).toEqual([1, 1]);
    // The witnesses now refuse the log whichever database it comes from.
    expect((await signed("honest again", ports.client)).code).toBe(3);
    await fork.stop();
  }, 180_000);

  test("witness A killed with SIGKILL eight times while the notary pushes, witness B down for a while: nothing cosigned that the log does not hold, nothing refused, and both cosign again", async () => {
    const tb = testbed();
    const web = workload(tb, "web").spiffeId;
    for (const w of Object.values(witnesses))
      expect((await svc(["notary", "witness", "--database", w.db, "--forget", web], w.as)).code).toBe(0);
    // Requests go on through the notary while witness A is killed.
    let loading = true;
    let sent = 0;
    const load = (async () => {
      while (loading) {
        const r = await fetch(`http://127.0.0.1:${ports.client}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json", "svc-notarization-level": "signRequest" },
          body: chat(`load ${sent}`),
        });
        await r.arrayBuffer();
        expect(r.status).toBe(200);
        sent++;
      }
    })();
    const cosigned = (port: number) => witnessCount(port, "cosigned");
    for (let kill = 0; kill < 8; kill++) {
      const before = await cosigned(ports.waMetrics);
      await waitUntil("witness A cosigning", async () => (await cosigned(ports.waMetrics)) > before + 2);
      witnesses.wa.proc.proc.kill("SIGKILL");
      await witnesses.wa.proc.exited;
      witnesses.wa.proc = witnesses.wa.start();
      await waitForPort(ports.waMetrics, 60_000);
    }
    await waitUntil(
      "witness A cosigning after its last restart",
      async () => (await cosigned(ports.waMetrics)) > 2,
    );
    // Witness B unreachable: a policy of both fails, one of A alone passes; B back, both pass again.
    await witnesses.wb.proc.stop("SIGTERM");
    const both = await signed("B is down", ports.client);
    expect(both.code).toBe(3);
    expect(both.stderr).toContain("witness check failed");
    const onlyA = await signed("A alone", ports.client, ["intruder"]);
    expect(onlyA.code).toBe(0);
    witnesses.wb.proc = witnesses.wb.start();
    await waitForPort(ports.wb, 60_000);
    const back = await signed("B is back", ports.client);
    expect({ code: back.code, stderr: back.code === 0 ? "" : back.stderr }).toEqual({ code: 0, stderr: "" });
    loading = false;
    await load;
    expect(sent).toBeGreaterThan(0);
    // Nothing refused: no new evidence, no log refused.
    for (const w of Object.values(witnesses)) {
      const doc = JSON.parse(
        (await svc(["notary", "witness", "--database", w.db, "-o", "json"], w.as)).stdout,
      );
      expect(doc.logs[0].refused).toBeUndefined();
      expect(doc.evidence).toHaveLength(2);
    }
    // Every cosignature the notary kept is of a tree head of its log: that size, that root.
    const d = new Database(db, { readonly: true });
    const heads = new Map(
      (d.query("SELECT size, root FROM tree_heads").all() as { size: number; root: Uint8Array }[]).map(
        (h) => [h.size, Buffer.from(h.root).toString("base64url")],
      ),
    );
    const rows = d.query("SELECT size, witness, jws FROM cosignatures").all() as {
      size: number;
      witness: string;
      jws: string;
    }[];
    d.close();
    expect(rows.length).toBeGreaterThan(8);
    for (const r of rows) {
      const claims = JSON.parse(Buffer.from(r.jws.split(".")[1] as string, "base64url").toString());
      expect({ size: claims.size, root: claims.root }).toEqual({ size: r.size, root: heads.get(r.size) });
    }
    // And what each witness holds is a tree head of the log.
    for (const w of Object.values(witnesses)) {
      const held = new Database(w.db, { readonly: true });
      const row = held.query("SELECT size, root FROM logs").get() as { size: number; root: Uint8Array };
      held.close();
      expect(Buffer.from(row.root).toString("base64url")).toBe(heads.get(row.size) as string);
    }
  }, 300_000);
});
