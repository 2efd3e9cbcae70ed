import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { onlyProd, prodId, tempDir, webAndPodApis } from "../support/dev-api.ts";
import { writeKubeconfig } from "../support/kubeconfig.ts";
import { freePort } from "../support/net.ts";
import { BUN, runToEnd, stopAll } from "../support/proc.ts";
import { startSvcProxy, waitForLog } from "../support/proxy.ts";

/**
 * The notary's pod look-up when the cluster API misbehaves: a plain-HTTP server the kubeconfig does not
 * accept stops the proxy at start with one line; an API server that refuses, or answers what is not a
 * pod, costs that one request a 502 naming the cluster API, and the proxy keeps serving. (The look-up
 * against a real kube-apiserver is tests/e2e/notary.e2e.test.ts.)
 */
const dir = tempDir("svc-notary-cluster-");
const pod = { name: "llm-0", uid: "0b7d4c1e-0000-4000-8000-000000000001" };
const llmId = `${prodId("llm")}/pod/${pod.name}/${pod.uid}`;
/** What the faulty cluster API answers next. */
let answer: () => Response = () =>
  new Response("not json", { headers: { "content-type": "application/json" } });
const clusterApi = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => answer() });
const llm = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch: () => Response.json({ id: "c", object: "chat.completion", model: "m", choices: [] }),
});

const kubeconfig = (
  name: string,
  cluster: Record<string, unknown>,
  user: Record<string, unknown> = { token: "t" },
) => writeKubeconfig(join(dir, name), cluster, user);

const clientConfig = (port: number, serverPort: number, db = "notary.db") => ({
  spiffe: { workload_socket_path: `unix://${join(dir, "web.sock")}` },
  metricsAddr: "0",
  notary: { enable: true, database: { path: join(dir, db) } },
  listeners: [
    {
      name: "llm-out",
      address: `127.0.0.1:${port}`,
      mode: "client",
      target: { url: `https://127.0.0.1:${serverPort}`, spiffe_ids: [`^${prodId("llm")}/pod/`] },
      middlewares: [{ type: "notary-query" }, { type: "openai" }],
    },
  ],
});
let clientPort = 0;
let serverPort = 0;

beforeAll(async () => {
  const { pod: llmApi } = await webAndPodApis(dir, llmId);
  [clientPort, serverPort] = await Promise.all([freePort(), freePort()]);
  await startSvcProxy({
    spiffe: { workload_socket_path: llmApi.socket },
    metricsAddr: "0",
    listeners: [
      {
        name: "llm-in",
        address: `127.0.0.1:${serverPort}`,
        mode: "server",
        target: { url: `http://127.0.0.1:${llm.port}` },
        source: { spiffe_ids: onlyProd("web") },
      },
    ],
  });
});

afterAll(async () => {
  await stopAll();
  clusterApi.stop(true);
  llm.stop(true);
  rmSync(dir, { recursive: true, force: true });
});

const ask = (port: number) =>
  fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] }),
  });

describe("the notary and a cluster API that misbehaves", () => {
  test("a plain-HTTP cluster API the kubeconfig does not accept stops the proxy at start, in one line", async () => {
    const plain = kubeconfig("plain", { server: `http://127.0.0.1:${clusterApi.port}` });
    const r = await runToEnd([BUN, "cmd/svc-proxy.ts"], {
      env: {
        ...process.env,
        SVC_PROXY_CONFIG: JSON.stringify(clientConfig(await freePort(), serverPort)),
        KUBECONFIG: plain,
      },
    });
    expect(r.code).toBe(1);
    expect(r.err).toContain(
      `cluster API http://127.0.0.1:${clusterApi.port} (kubeconfig) is plain HTTP, which sends credentials unencrypted: use https, or set insecure-skip-tls-verify: true on the kubeconfig's cluster to accept it`,
    );
    expect(r.err).not.toContain("    at ");
  });

  test("an answer that is not a pod, or a refusal, is a 502 for that request; the proxy goes on", async () => {
    const accepted = kubeconfig("accepted", {
      server: `http://127.0.0.1:${clusterApi.port}`,
      "insecure-skip-tls-verify": true,
    });
    const proxy = await startSvcProxy(clientConfig(clientPort, serverPort), [], { KUBECONFIG: accepted });

    answer = () => new Response("not json", { headers: { "content-type": "application/json" } });
    const garbage = await ask(clientPort);
    expect(garbage.status).toBe(502);
    expect(await garbage.text()).toContain(
      `notary: no workload statement for ${llmId}: cluster API http://127.0.0.1:${clusterApi.port} gave no answer about pod prod/${pod.name} (kubeconfig):`,
    );

    answer = () => Response.json({ kind: "Status", code: 403, reason: "Forbidden" }, { status: 403 });
    const refused = await ask(clientPort);
    expect(refused.status).toBe(502);
    expect(await refused.text()).toContain(`cluster API refused to get pod prod/${pod.name}: 403`);

    answer = () =>
      Response.json({
        apiVersion: "v1",
        kind: "Pod",
        metadata: { name: pod.name, namespace: "prod", uid: pod.uid },
        spec: { serviceAccountName: "llm", containers: [{ name: "llm", image: "llm:1" }] },
      });
    const served = await ask(clientPort);
    expect(served.status).toBe(200);
    expect(served.headers.get("svc-workload-id")).toBeTruthy();
    await waitForLog(proxy, "notary refused the upstream");
    expect(proxy.stderr()).not.toContain("middleware failed");
  });

  test("credentials that cannot be had (a failing exec plugin) are a 502 saying so, not a refusal", async () => {
    const failing = kubeconfig(
      "exec",
      { server: `http://127.0.0.1:${clusterApi.port}`, "insecure-skip-tls-verify": true },
      { exec: { apiVersion: "client.authentication.k8s.io/v1", command: "false", interactiveMode: "Never" } },
    );
    const port = await freePort();
    await startSvcProxy(clientConfig(port, serverPort, "notary-exec.db"), [], { KUBECONFIG: failing });
    const r = await ask(port);
    expect(r.status).toBe(502);
    const text = await r.text();
    expect(text).toContain(
      `cannot get credentials for cluster API http://127.0.0.1:${clusterApi.port} (kubeconfig)`,
    );
    expect(text).not.toContain("refused to get pod");
  });
});
