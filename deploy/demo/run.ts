/**
 * `make demo`: two workloads talk through a client→server svc-proxy pair with SVIDs from the development
 * Workload API. One caller is allowed by the server's pattern, one is refused. Then the caller asks a
 * chat-completions workload through its proxy's notary for a signed receipt, and the receipt is verified
 * offline, whole and after a change. Shows what the upstream saw, the refusal, the receipt and the
 * metrics; stops everything on exit.
 */

import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Server, type Subprocess, spawn } from "bun";

const ROOT = new URL("../..", import.meta.url).pathname;
const bin = (name: string) => join(ROOT, "dist", name);
const dir = mkdtempSync(join(tmpdir(), "svc-demo-"));
const procs: Subprocess[] = [];
const servers: Server<undefined>[] = [];
const td = "demo.svc";
const id = (sa: string) => `spiffe://${td}/ns/shop/sa/${sa}`;
// The chat-completions workload has a pod identity: the notary states only pods it can look up.
const llmPod = { name: "llm-0", uid: "7d1c2a4e-0000-4000-8000-000000000001" };
const llmId = `${id("llm")}/pod/${llmPod.name}/${llmPod.uid}`;
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

/** Runs a command to its end and returns its exit status and output. */
async function run(
  cmd: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  const p = spawn(cmd, { env: { ...process.env, ...env }, stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, code] = await Promise.all([
    new Response(p.stdout).text(),
    new Response(p.stderr).text(),
    p.exited,
  ]);
  return { code, stdout, stderr };
}

async function waitFor(what: string, check: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 150; i++) {
    if (await check().catch(() => false)) return;
    await Bun.sleep(100);
  }
  throw new Error(`${what} did not start; logs are in ${dir}`);
}

/** A plain HTTP server on loopback, stopped with everything else. */
function serve(fetch: (req: Request) => Response): Server<undefined> {
  const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch });
  servers.push(server);
  return server;
}

async function cleanup(): Promise<void> {
  for (const s of servers) s.stop(true);
  for (const p of procs.reverse()) p.kill("SIGTERM");
  await Promise.all(procs.map((p) => p.exited));
  // A failed demo keeps its directory: the error names it, for the logs.
  if (!process.exitCode) rmSync(dir, { recursive: true, force: true });
}
process.on("SIGINT", () => void cleanup().then(() => process.exit(130)));

try {
  step("1. A development Workload API per workload (one trust domain, one CA)");
  for (const sa of ["checkout", "scraper", "orders", "llm"]) {
    start([
      bin("svc"),
      "dev",
      "workload-api",
      "--socket",
      join(dir, `${sa}.sock`),
      "--spiffe-id",
      sa === "llm" ? llmId : id(sa),
      "--ca-dir",
      join(dir, "ca"),
      "--ttl",
      "1h",
    ]);
    await waitFor(`workload API for ${sa}`, async () => existsSync(join(dir, `${sa}.sock`)));
    console.log(`   ${sa === "llm" ? llmId : id(sa)}  on unix://${join(dir, `${sa}.sock`)}`);
  }

  step("2. Sample upstreams: orders reports what it received; llm answers chat completions");
  const upstream = serve((req) =>
    Response.json({ path: new URL(req.url).pathname, "svc-peer-id": req.headers.get("svc-peer-id") }),
  );
  const llm = serve(() =>
    Response.json({
      id: "chatcmpl-demo",
      object: "chat.completion",
      created: 1_700_000_000,
      model: "demo",
      choices: [
        { index: 0, finish_reason: "stop", message: { role: "assistant", content: "Order 42 ships today." } },
      ],
    }),
  );
  console.log(`   orders: http://127.0.0.1:${upstream.port}   llm: http://127.0.0.1:${llm.port}`);

  step("3. A stand-in Kubernetes API that knows the llm pod (the notary checks every pod it vouches for)");
  // The demo has no cluster: this answers GET for one pod, enough for the notary's look-up. `make e2e`
  // runs the notary against a real kube-apiserver.
  const podPath = `/api/v1/namespaces/shop/pods/${llmPod.name}`;
  const kubeApi = serve((req) =>
    new URL(req.url).pathname === podPath
      ? Response.json({
          apiVersion: "v1",
          kind: "Pod",
          metadata: {
            name: llmPod.name,
            namespace: "shop",
            uid: llmPod.uid,
            labels: { app: "llm", "svc.io/compartment": "US-TS-ALPHA" },
          },
          spec: { serviceAccountName: "llm", containers: [{ name: "llm", image: "registry.demo/llm:1.0" }] },
        })
      : Response.json({ kind: "Status", code: 404, reason: "NotFound" }, { status: 404 }),
  );
  const kubeconfig = join(dir, "kubeconfig");
  await Bun.write(
    kubeconfig,
    JSON.stringify({
      apiVersion: "v1",
      kind: "Config",
      // Plain HTTP on loopback; client-node takes an http:// server only with this flag set.
      clusters: [
        {
          name: "demo",
          cluster: { server: `http://127.0.0.1:${kubeApi.port}`, "insecure-skip-tls-verify": true },
        },
      ],
      users: [{ name: "demo", user: {} }],
      contexts: [{ name: "demo", context: { cluster: "demo", user: "demo" } }],
      "current-context": "demo",
    }),
  );
  console.log(`   http://127.0.0.1:${kubeApi.port}${podPath}`);

  step("4. svc-proxy in server mode as orders (allowing only checkout) and as llm");
  const [serverPort, llmPort, metricsPort, checkoutPort, scraperPort, notaryPort] = await Promise.all([
    freePort(),
    freePort(),
    freePort(),
    freePort(),
    freePort(),
    freePort(),
  ]);
  const serverConfig = (sa: string, port: number, target: number, metrics: string) => ({
    spiffe: { workload_socket_path: `unix://${join(dir, `${sa}.sock`)}` },
    metricsAddr: metrics,
    listeners: [
      {
        name: `${sa}-in`,
        address: `127.0.0.1:${port}`,
        mode: "server",
        target: { url: `http://127.0.0.1:${target}` },
        source: { spiffe_ids: [`^spiffe://demo\\.svc/ns/shop/sa/checkout$`] },
      },
    ],
  });
  const orders = serverConfig("orders", serverPort, upstream.port as number, `127.0.0.1:${metricsPort}`);
  console.log(`   source.spiffe_ids: ${orders.listeners[0]?.source.spiffe_ids[0]}`);
  start([bin("svc-proxy")], { SVC_PROXY_CONFIG: JSON.stringify(orders) }, join(dir, "orders-proxy.log"));
  const llmServer = serverConfig("llm", llmPort, llm.port as number, "0");
  start([bin("svc-proxy")], { SVC_PROXY_CONFIG: JSON.stringify(llmServer) }, join(dir, "llm-proxy.log"));

  step("5. svc-proxy in client mode beside checkout (with the notary) and beside scraper");
  const clientListener = (sa: string, port: number) => ({
    name: `${sa}-out`,
    address: `127.0.0.1:${port}`,
    mode: "client",
    target: {
      url: `https://127.0.0.1:${serverPort}`,
      spiffe_ids: [`^spiffe://demo\\.svc/ns/shop/sa/orders$`],
    },
  });
  const checkout = {
    spiffe: { workload_socket_path: `unix://${join(dir, "checkout.sock")}` },
    metricsAddr: "0",
    notary: { enable: true, database: { path: join(dir, "notary.db") } },
    listeners: [
      clientListener("checkout", checkoutPort),
      {
        name: "checkout-llm",
        address: `127.0.0.1:${notaryPort}`,
        mode: "client",
        target: {
          url: `https://127.0.0.1:${llmPort}`,
          spiffe_ids: [`^spiffe://demo\\.svc/ns/shop/sa/llm/pod/`],
        },
        middlewares: [{ type: "notary-query" }, { type: "openai" }],
      },
    ],
  };
  const scraper = {
    spiffe: { workload_socket_path: `unix://${join(dir, "scraper.sock")}` },
    metricsAddr: "0",
    listeners: [clientListener("scraper", scraperPort)],
  };
  start(
    [bin("svc-proxy")],
    { SVC_PROXY_CONFIG: JSON.stringify(checkout), KUBECONFIG: kubeconfig },
    join(dir, "checkout-proxy.log"),
  );
  start([bin("svc-proxy")], { SVC_PROXY_CONFIG: JSON.stringify(scraper) }, join(dir, "scraper-proxy.log"));
  console.log(`   checkout: plaintext in at http://127.0.0.1:${checkoutPort} (orders)`);
  console.log(`             and http://127.0.0.1:${notaryPort} (llm, notarized: notary-query, openai)`);
  console.log(`   scraper:  plaintext in at http://127.0.0.1:${scraperPort} (orders)`);
  for (const log of ["orders-proxy", "llm-proxy", "checkout-proxy", "scraper-proxy"]) {
    await waitFor(log, async () => {
      const text = await Bun.file(join(dir, `${log}.log`)).text();
      const listeners = log === "checkout-proxy" ? 2 : 1;
      return text.split('"msg":"listening"').length > listeners;
    });
  }

  step("6. checkout calls orders (allowed)");
  const ok = await fetch(`http://127.0.0.1:${checkoutPort}/orders/42`);
  console.log(`   HTTP ${ok.status}; the upstream saw: ${await ok.text()}`);

  step("7. scraper calls orders (refused by the pattern)");
  const refused = await fetch(`http://127.0.0.1:${scraperPort}/orders/42`);
  console.log(`   HTTP ${refused.status}: ${(await refused.text()).trim()}`);
  await waitFor("the refusal's log line", async () =>
    (await Bun.file(join(dir, "orders-proxy.log")).text()).includes("unauthorized_peer"),
  );
  const reason = (await Bun.file(join(dir, "orders-proxy.log")).text())
    .split("\n")
    .find((l) => l.includes("unauthorized_peer"));
  console.log(`   server proxy log: ${reason}`);

  step(`8. Metrics of the orders proxy (http://127.0.0.1:${metricsPort}/metrics)`);
  const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  for (const line of metrics
    .split("\n")
    .filter((l) => /^svc_proxy_(http_requests_total|denied_total|connections_total)/.test(l))) {
    console.log(`   ${line}`);
  }

  step("9. checkout asks llm for a chat completion with a signed receipt (svc curl -n signRequest)");
  const receiptFile = join(dir, "receipt.json");
  const curl = await run(
    [
      bin("svc"),
      "curl",
      "-n",
      "signRequest",
      "-o",
      "json",
      "-d",
      '{"model":"demo","messages":[{"role":"user","content":"When does order 42 ship?"}]}',
      `http://127.0.0.1:${notaryPort}/v1/chat/completions`,
    ],
    { SPIFFE_ENDPOINT_SOCKET: `unix://${join(dir, "checkout.sock")}` },
  );
  if (curl.code !== 0)
    throw new Error(`svc curl failed (exit ${curl.code}): ${curl.stderr.trim()}; logs are in ${dir}`);
  await Bun.write(receiptFile, curl.stdout);
  const saved = JSON.parse(curl.stdout) as {
    status: number;
    body: string;
    receipt?: { id: string };
  };
  console.log(
    `   $ svc curl -n signRequest -o json -d '{…}' http://127.0.0.1:${notaryPort}/v1/chat/completions`,
  );
  for (const line of curl.stderr.trim().split("\n")) console.log(`   ${line}`);
  const answer = (JSON.parse(saved.body) as { choices: { message: { content: string } }[] }).choices[0];
  console.log(`   HTTP ${saved.status}; the answer: "${answer?.message.content}"; saved to ${receiptFile}`);

  step("10. The receipt verified offline, with nothing but the trust bundle");
  const bundle = join(dir, "ca", "ca.pem");
  const proofFile = join(dir, "proof.json");
  const proof = await fetch(`http://127.0.0.1:${notaryPort}/.svc/receipt/${saved.receipt?.id}/proof`);
  await Bun.write(proofFile, await proof.text());
  console.log(
    `   $ curl http://127.0.0.1:${notaryPort}/.svc/receipt/<id>/proof > proof.json   (HTTP ${proof.status})`,
  );
  const verified = await run([
    bin("svc"),
    "notary",
    "verify",
    receiptFile,
    "--proof",
    proofFile,
    "--bundle",
    bundle,
  ]);
  console.log(
    `   $ svc notary verify receipt.json --proof proof.json --bundle ca/ca.pem   (exit ${verified.code})`,
  );
  // Standard output prints the receipt whole; its last line is the log's.
  const inLog = verified.stdout.split("\n").find((l) => l.startsWith("In the notary log"));
  console.log(`   ${inLog}\n   ${verified.stderr.trim()}`);

  step("11. The same receipt with one word of the answer changed: refused");
  const forged = JSON.parse(curl.stdout) as { response: { bodyBase64: string } };
  forged.response.bodyBase64 = Buffer.from(
    Buffer.from(forged.response.bodyBase64, "base64").toString().replace("today", "never"),
  ).toString("base64");
  const forgedFile = join(dir, "forged.json");
  await Bun.write(forgedFile, JSON.stringify(forged));
  const refusedReceipt = await run([bin("svc"), "notary", "verify", forgedFile, "--bundle", bundle]);
  console.log(`   $ svc notary verify forged.json --bundle ca/ca.pem   (exit ${refusedReceipt.code})`);
  console.log(`   ${refusedReceipt.stderr.trim()}`);
  if (curl.code !== 0 || verified.code !== 0 || refusedReceipt.code !== 3)
    throw new Error(
      `the notary steps did not go as shown (exit ${curl.code}, ${verified.code}, ${refusedReceipt.code}); logs are in ${dir}`,
    );
  console.log("\nDone; stopping everything.");
} catch (e) {
  console.error(`demo failed: ${(e as Error).message}`);
  process.exitCode = 1;
} finally {
  await cleanup();
}
