/**
 * `make demo`: two workloads talk through a client→server svc-proxy pair with SVIDs from the development
 * Workload API. One caller is allowed by the server's pattern, one is refused. Shows what the upstream
 * saw, the refusal, and the metrics; stops everything on exit.
 */

import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Subprocess, spawn } from "bun";

const ROOT = new URL("../..", import.meta.url).pathname;
const bin = (name: string) => join(ROOT, "dist", name);
const dir = mkdtempSync(join(tmpdir(), "svc-demo-"));
const procs: Subprocess[] = [];
const td = "demo.svc";
const id = (sa: string) => `spiffe://${td}/ns/shop/sa/${sa}`;
const step = (title: string) => console.log(`\n\x1b[1m== ${title}\x1b[0m`);

async function freePort(): Promise<number> {
  const s = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}

function start(cmd: string[], env: Record<string, string> = {}, logFile?: string): Subprocess {
  const p = spawn(cmd, {
    env: { ...process.env, ...env },
    stdout: "pipe",
    stderr: logFile ? Bun.file(logFile) : "ignore",
  });
  procs.push(p);
  return p;
}

async function waitFor(what: string, check: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 150; i++) {
    if (await check().catch(() => false)) return;
    await Bun.sleep(100);
  }
  throw new Error(`${what} did not start; logs are in ${dir}`);
}

async function cleanup(): Promise<void> {
  for (const p of procs.reverse()) p.kill("SIGTERM");
  await Promise.all(procs.map((p) => p.exited));
  rmSync(dir, { recursive: true, force: true });
}
process.on("SIGINT", () => void cleanup().then(() => process.exit(130)));

try {
  step("1. A development Workload API per workload (one trust domain, one CA)");
  for (const sa of ["checkout", "scraper", "orders"]) {
    start([
      bin("svc"),
      "dev",
      "workload-api",
      "--socket",
      join(dir, `${sa}.sock`),
      "--spiffe-id",
      id(sa),
      "--ca-dir",
      join(dir, "ca"),
      "--ttl",
      "1h",
    ]);
    await waitFor(`workload API for ${sa}`, async () => existsSync(join(dir, `${sa}.sock`)));
    console.log(`   ${id(sa)}  on unix://${join(dir, `${sa}.sock`)}`);
  }

  step("2. A sample upstream that reports what it received");
  const upstream = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch: (req) =>
      Response.json({ path: new URL(req.url).pathname, "svc-peer-id": req.headers.get("svc-peer-id") }),
  });
  console.log(`   http://127.0.0.1:${upstream.port}`);

  step("3. svc-proxy in server mode as orders, allowing only checkout");
  const [serverPort, metricsPort, checkoutPort, scraperPort] = await Promise.all([
    freePort(),
    freePort(),
    freePort(),
    freePort(),
  ]);
  const serverConfig = {
    spiffe: { workload_socket_path: `unix://${join(dir, "orders.sock")}` },
    metricsAddr: `127.0.0.1:${metricsPort}`,
    listeners: [
      {
        name: "orders-in",
        address: `127.0.0.1:${serverPort}`,
        mode: "server",
        target: { url: `http://127.0.0.1:${upstream.port}` },
        source: { spiffe_ids: [`^spiffe://demo\\.svc/ns/shop/sa/checkout$`] },
      },
    ],
  };
  console.log(`   source.spiffe_ids: ${serverConfig.listeners[0]?.source.spiffe_ids[0]}`);
  start(
    [bin("svc-proxy")],
    { SVC_PROXY_CONFIG: JSON.stringify(serverConfig) },
    join(dir, "server-proxy.log"),
  );

  step("4. svc-proxy in client mode beside checkout and beside scraper");
  for (const [sa, port] of [
    ["checkout", checkoutPort],
    ["scraper", scraperPort],
  ] as const) {
    const cfg = {
      spiffe: { workload_socket_path: `unix://${join(dir, `${sa}.sock`)}` },
      metricsAddr: "0",
      listeners: [
        {
          name: `${sa}-out`,
          address: `127.0.0.1:${port}`,
          mode: "client",
          target: {
            url: `https://127.0.0.1:${serverPort}`,
            spiffe_ids: [`^spiffe://demo\\.svc/ns/shop/sa/orders$`],
          },
        },
      ],
    };
    start([bin("svc-proxy")], { SVC_PROXY_CONFIG: JSON.stringify(cfg) }, join(dir, `${sa}-proxy.log`));
    console.log(`   ${sa}: plaintext in at http://127.0.0.1:${port}, SPIFFE mTLS out to orders`);
  }
  for (const log of ["server-proxy", "checkout-proxy", "scraper-proxy"]) {
    await waitFor(log, async () =>
      (await Bun.file(join(dir, `${log}.log`)).text()).includes('"msg":"listening"'),
    );
  }

  step("5. checkout calls orders (allowed)");
  const ok = await fetch(`http://127.0.0.1:${checkoutPort}/orders/42`);
  console.log(`   HTTP ${ok.status}; the upstream saw: ${await ok.text()}`);

  step("6. scraper calls orders (refused by the pattern)");
  const refused = await fetch(`http://127.0.0.1:${scraperPort}/orders/42`);
  console.log(`   HTTP ${refused.status}: ${(await refused.text()).trim()}`);
  await Bun.sleep(200);
  const reason = (await Bun.file(join(dir, "server-proxy.log")).text())
    .split("\n")
    .find((l) => l.includes("unauthorized_peer"));
  console.log(`   server proxy log: ${reason}`);

  step(`7. Metrics of the server proxy (http://127.0.0.1:${metricsPort}/metrics)`);
  const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  for (const line of metrics
    .split("\n")
    .filter((l) => /^svc_proxy_(http_requests_total|denied_total|connections_total)/.test(l))) {
    console.log(`   ${line}`);
  }
  upstream.stop(true);
  console.log("\nDone; stopping everything.");
} catch (e) {
  console.error(`demo failed: ${(e as Error).message}`);
  process.exitCode = 1;
} finally {
  await cleanup();
}
