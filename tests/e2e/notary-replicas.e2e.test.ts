import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import type { Server } from "node:http";
import { join } from "node:path";
import { type InclusionProof, verifyReceiptInclusion } from "../../lib/notary-objects/log.ts";
import { verifyReceipt } from "../../lib/notary-objects/receipt.ts";
import { loadBundleFile } from "../../lib/spiffe/bundle-file.ts";
import { checkLog } from "../../proxy/notary-service/log-check.ts";
import { PostgresNotaryStore } from "../../proxy/notary-service/records-postgres.ts";
import { compiled } from "../support/compiled.ts";
import { waitForPort } from "../support/net.ts";
import { type Postgres, startPostgres } from "../support/postgres.ts";
import { type Proc, ROOT, stopAll } from "../support/proc.ts";
import { waitUntil } from "../support/wait.ts";
import { exactId, modelBehindApi, svcProxyAs, useTestbed, workload, workloadHome } from "./support.ts";
import { freePort } from "./testbed/process.ts";
import { asWorkload } from "./testbed/spire.ts";

/**
 * Central proxies that scale out: two replicas of a central notarizing proxy (pod web-0's identity,
 * openai + notary-query) on one PostgreSQL, each reached through its own client proxy, callers taking
 * turns between them. Every receipt is served, and proven in the log, by both replicas; twenty SIGKILLs
 * of one replica under load lose no acknowledged receipt; PostgreSQL stopped for 10 s turns notarized
 * requests into 503s (never an unstored receipt) while other traffic flows, and service resumes by itself.
 */
const testbed = useTestbed();
let upstream: Server;
let pg: Postgres;
const ports = { api: 0, a: 0, b: 0, toA: 0, toB: 0 };
let replicas: Record<"a" | "b", Proc>;
let startReplica: (r: "a" | "b") => Proc;
let bundle: ReturnType<typeof loadBundleFile>;

beforeAll(async () => {
  const tb = testbed();
  bundle = loadBundleFile(tb.spire.bundleFile);
  pg = await startPostgres(join(tb.dir, "notary-replicas"));
  await pg.createDatabase("notary");
  for (const k of Object.keys(ports)) ports[k as keyof typeof ports] = await freePort();
  const web = workload(tb, "web");
  const home = workloadHome(tb, "web", "notary-replicas-e2e");
  const passwordFile = join(home.dir, "pg-password");
  writeFileSync(passwordFile, `${pg.password}\n`, { mode: 0o600 });
  Bun.spawnSync(["chown", String(web.uid), passwordFile]);
  upstream = await modelBehindApi(tb, ports.api);
  startReplica = (r) =>
    svcProxyAs(
      tb,
      "web",
      {
        notary: {
          enable: true,
          database: { url: pg.url("notary"), password_file: passwordFile, pool_size: 4 },
        },
        listeners: [
          {
            name: "central",
            address: `127.0.0.1:${ports[r]}`,
            mode: "central",
            target: {
              url: `https://127.0.0.1:${ports.api}`,
              spiffe_ids: [exactId(workload(tb, "api").spiffeId)],
            },
            source: { spiffe_ids: [exactId(web.spiffeId)] },
            // allowUnknown: other paths pass unnotarized (the traffic that needs no notary).
            middlewares: [{ type: "notary-query" }, { type: "openai", allowUnknown: true }],
          },
        ],
      },
      { KUBECONFIG: home.kubeconfig },
    );
  replicas = { a: startReplica("a"), b: startReplica("b") };
  for (const [name, to] of [
    ["toA", ports.a],
    ["toB", ports.b],
  ] as const)
    svcProxyAs(tb, "web", {
      listeners: [
        {
          name,
          address: `127.0.0.1:${ports[name]}`,
          mode: "client",
          target: { url: `https://127.0.0.1:${to}`, spiffe_ids: [exactId(web.spiffeId)] },
        },
      ],
    });
  for (const p of Object.values(ports)) await waitForPort(p, 60_000);
}, 180_000);

afterAll(async () => {
  await stopAll();
  upstream?.close();
});

const via = (n: number) => (n % 2 === 0 ? ports.toA : ports.toB);

/** One signRequest call through replica n % 2: its status and, when acknowledged, its receipt. */
async function notarized(n: number): Promise<{ status: number; id?: string; jws?: string }> {
  const r = await fetch(`http://127.0.0.1:${via(n)}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", "svc-notarization-level": "signRequest" },
    body: JSON.stringify({ model: "test-model", messages: [{ role: "user", content: `call ${n}` }] }),
  });
  await r.arrayBuffer();
  const id = r.headers.get("svc-receipt-id") ?? undefined;
  const jws = r.headers.get("svc-receipt") ?? undefined;
  return { status: r.status, ...(id ? { id } : {}), ...(jws ? { jws } : {}) };
}

async function storedReceipts(): Promise<Set<string>> {
  const { SQL } = await import("bun");
  const sql = new SQL({ url: pg.url("notary"), password: pg.password, max: 1 });
  try {
    return new Set((await sql`SELECT id FROM receipts`).map((r: { id: string }) => r.id));
  } finally {
    await sql.close();
  }
}

async function logProblems(): Promise<string[]> {
  const store = await PostgresNotaryStore.open({ url: pg.url("notary"), password: pg.password, poolSize: 2 });
  try {
    return (await checkLog(store, bundle)).problems;
  } finally {
    await store.close();
  }
}

describe("two central notary replicas on one PostgreSQL", () => {
  test("every receipt either replica issued is served and proven by both, and verifies offline", async () => {
    const issued = [];
    for (let n = 0; n < 20; n++) {
      const r = await notarized(n);
      expect(r.status).toBe(200);
      issued.push(r as { id: string; jws: string });
    }
    for (const r of issued) {
      await verifyReceipt(r.jws, bundle, { expectedId: r.id });
      for (const port of [ports.toA, ports.toB]) {
        const got = await fetch(`http://127.0.0.1:${port}/.svc/receipt/${r.id}`);
        expect(got.status).toBe(200);
        expect(((await got.json()) as { receipt: string }).receipt).toBe(r.jws);
        const proof = (await (
          await fetch(`http://127.0.0.1:${port}/.svc/receipt/${r.id}/proof`)
        ).json()) as InclusionProof;
        const head = await verifyReceiptInclusion(r.jws, proof, bundle);
        expect(head.issuer.uri).toBe(workload(testbed(), "web").spiffeId);
      }
    }
    // The CLI, offline, on one of them: receipt and proof saved to files.
    const tb = testbed();
    const dir = join(tb.dir, "home", "notary-replicas-e2e");
    const r = issued[7] as { id: string; jws: string };
    writeFileSync(join(dir, "receipt.jws"), r.jws);
    writeFileSync(
      join(dir, "proof.json"),
      await (await fetch(`http://127.0.0.1:${ports.toB}/.svc/receipt/${r.id}/proof`)).text(),
    );
    const cli = Bun.spawnSync(
      asWorkload(workload(tb, "web"), [
        compiled("svc"),
        "notary",
        "verify",
        join(dir, "receipt.jws"),
        "--proof",
        join(dir, "proof.json"),
        "--bundle",
        tb.spire.bundleFile,
      ]),
      { cwd: ROOT, env: { ...process.env, HOME: dir } },
    );
    expect(cli.stdout.toString()).toContain("In the notary log: leaf ");
    expect(cli.exitCode).toBe(0);
    expect(await logProblems()).toEqual([]);
  }, 120_000);

  test("twenty SIGKILLs of one replica under load lose no acknowledged receipt", async () => {
    const acked: string[] = [];
    let failed = 0;
    let stop = false;
    const caller = async (c: number) => {
      for (let i = c; !stop; i += 4) {
        try {
          const r = await notarized(i);
          if (r.status === 200 && r.id) acked.push(r.id);
          else {
            failed++;
            await Bun.sleep(20); // pacing while the replica restarts, not synchronization
          }
        } catch {
          failed++;
          await Bun.sleep(20); // pacing while the replica restarts, not synchronization
        }
      }
    };
    const callers = Array.from({ length: 4 }, (_, c) => caller(c));
    try {
      for (let kill = 0; kill < 20; kill++) {
        const before = acked.length;
        await waitUntil("6 more acknowledged receipts", () => acked.length >= before + 6, 30_000).catch(
          () => {},
        );
        expect(acked.length).toBeGreaterThanOrEqual(before + 6);
        replicas.a.proc.kill("SIGKILL");
        await replicas.a.exited;
        replicas.a = startReplica("a");
        // A replica that does not come back says why.
        await waitForPort(ports.a, 60_000).catch((e: Error) => {
          throw new Error(
            `${e.message} (restart ${kill + 1}); replica a wrote:\n${replicas.a.stderr().slice(-3000)}`,
          );
        });
      }
    } finally {
      // The callers stop whatever happened, so that the next test is not run under their load.
      stop = true;
      await Promise.all(callers);
    }
    const stored = await storedReceipts();
    const lost = acked.filter((id) => !stored.has(id));
    console.log(
      `replica kill: ${acked.length} receipts acknowledged, ${failed} requests failed, ${lost.length} lost`,
    );
    expect(lost).toEqual([]);
    expect(await logProblems()).toEqual([]);
  }, 600_000);

  test("PostgreSQL stopped for 10 s: notarized requests get 503, none an unstored receipt; other traffic flows, also through a replica started meanwhile; service resumes", async () => {
    const during: { status: number; id?: string }[] = [];
    const plain: number[] = [];
    await pg.stop();
    const downUntil = Date.now() + 10_000;
    let restartedDown: { status: number; body: string } | undefined;
    try {
      // Replica a restarted while the database is down: it starts, serves what needs no notary, and
      // answers 503 for notarization.
      await replicas.a.stop();
      replicas.a = startReplica("a");
      await waitForPort(ports.a, 60_000);
      const r = await fetch(`http://127.0.0.1:${ports.toA}/.svc/receipt/${"A".repeat(43)}`);
      restartedDown = { status: r.status, body: await r.text() };
      for (let n = 0; Date.now() < downUntil; n++) {
        during.push(await notarized(n));
        plain.push((await fetch(`http://127.0.0.1:${via(n)}/health`)).status);
      }
    } finally {
      await pg.start();
    }
    expect(restartedDown?.status).toBe(503);
    expect(restartedDown?.body).toContain("is unreachable");
    console.log(
      `postgres outage: ${during.length} notarized requests answered ${[...new Set(during.map((r) => r.status))].join(", ")}, ${plain.length} plain requests answered ${[...new Set(plain)].join(", ")}`,
    );
    expect(during.length).toBeGreaterThan(0);
    expect(during.filter((r) => r.id)).toEqual([]);
    expect(new Set(during.map((r) => r.status))).toEqual(new Set([503]));
    expect(new Set(plain)).toEqual(new Set([200]));
    // It resumes by itself: both replicas issue receipts again, and they are stored.
    const resumed: string[] = [];
    const deadline = Date.now() + 30_000;
    for (let n = 0; resumed.length < 4 && Date.now() < deadline; n++) {
      const r = await notarized(n);
      if (r.status === 200 && r.id) resumed.push(r.id);
    }
    expect(resumed).toHaveLength(4);
    const stored = await storedReceipts();
    expect(resumed.filter((id) => !stored.has(id))).toEqual([]);
    expect(await logProblems()).toEqual([]);
  }, 120_000);

  test("a receipt edited in the database: a replica started on it refuses (503, saying why), svc notary verify reports it", async () => {
    const { SQL } = await import("bun");
    const sql = new SQL({ url: pg.url("notary"), password: pg.password, max: 1 });
    const [victim] = await sql`SELECT id, jws FROM receipts ORDER BY created_at LIMIT 1`;
    await sql`UPDATE receipts SET jws = ${`${victim.jws}x`} WHERE id = ${victim.id}`;
    await sql.close();
    await replicas.a.stop();
    replicas.a = startReplica("a");
    await waitForPort(ports.a, 60_000);
    const r = await notarized(0);
    expect(r.status).toBe(503);
    expect(r.id).toBeUndefined();
    const body = await (await fetch(`http://127.0.0.1:${ports.toA}/.svc/receipt/${victim.id}`)).text();
    expect(body).toContain("failed its consistency check at start-up");
    expect(replicas.a.stderr()).toContain("the log failed its consistency check");
    // Offline, on the database, with the password from the environment.
    const tb = testbed();
    const audit = Bun.spawnSync(
      [compiled("svc"), "notary", "verify", "--database", pg.url("notary"), "--bundle", tb.spire.bundleFile],
      { cwd: ROOT, env: { ...process.env, PGPASSWORD: pg.password } },
    );
    expect(audit.stdout.toString()).toContain(`(receipt ${victim.id}): the record does not hash to its leaf`);
    expect(audit.exitCode).toBe(3);
  }, 120_000);
});
