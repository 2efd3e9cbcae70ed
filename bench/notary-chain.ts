import { chownSync, copyFileSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { type Subprocess, spawn } from "bun";
import { readTestbed } from "../tests/e2e/testbed/index.ts";
import { asWorkload } from "../tests/e2e/testbed/spire.ts";

/**
 * What the notary benchmarks share: the running test bed, a work directory owned by workload web (with
 * its own copy of the kubeconfig, for the notary's pod lookups), a Bun upstream answering a
 * chat completion, and svc-proxy as a test bed workload: from source, or the given executable.
 */
export function notaryChain(name: string) {
  const ROOT = new URL("..", import.meta.url).pathname;
  const tb = readTestbed();
  if (!tb) throw new Error("the test bed is not running: make testbed-up");
  const [web, api] = [tb.spire.workloads.web, tb.spire.workloads.api];
  if (!web || !api) throw new Error("test bed workloads web and api missing");
  const procs: Subprocess[] = [];
  const work = join(tb.dir, "home", name);
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  chownSync(work, web.uid, web.uid);
  copyFileSync(tb.kube.kubeconfig, join(work, "kubeconfig"));
  chownSync(join(work, "kubeconfig"), web.uid, web.uid);

  const completion = JSON.stringify({
    id: "c",
    object: "chat.completion",
    created: 1,
    model: "m",
    choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content: "x".repeat(200) } }],
    usage: { prompt_tokens: 10, completion_tokens: 50, total_tokens: 60 },
  });
  const upstream = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch: () => new Response(completion, { headers: { "content-type": "application/json" } }),
  });
  const socket = `unix://${tb.spire.agentSocket}`;
  const proxy = (
    w: typeof web,
    config: object,
    command = [process.execPath, join(ROOT, "cmd/svc-proxy.ts")],
  ): Subprocess => {
    const p = spawn(asWorkload(w, [...command, "-zap-log-level=error"]), {
      cwd: ROOT,
      env: {
        ...process.env,
        KUBECONFIG: join(work, "kubeconfig"),
        SVC_PROXY_CONFIG: JSON.stringify({
          spiffe: { workload_socket_path: socket },
          metricsAddr: "0",
          ...config,
        }),
      },
      stdout: "ignore",
      stderr: "inherit",
    });
    procs.push(p);
    return p;
  };
  /** Pod api-0's server proxy on `port`, in front of the upstream: what the client proxies call. */
  const server = (port: number): Subprocess =>
    proxy(api, {
      listeners: [
        {
          name: "s",
          address: `127.0.0.1:${port}`,
          mode: "server",
          target: { url: `http://127.0.0.1:${upstream.port}` },
        },
      ],
    });
  /**
   * Pod web-0's client proxy on `port` (openai middleware) calling the server proxy on `serverPort`,
   * with `notary` as its notary section (none when undefined).
   */
  const client = (port: number, serverPort: number, notary?: object, command?: string[]): Subprocess =>
    proxy(
      web,
      {
        ...(notary ? { notary } : {}),
        listeners: [
          {
            name: "c",
            address: `127.0.0.1:${port}`,
            mode: "client",
            target: { url: `https://127.0.0.1:${serverPort}` },
            middlewares: [{ type: "openai" }],
          },
        ],
      },
      command,
    );
  return {
    tb,
    web,
    api,
    work,
    upstream,
    proxy,
    server,
    client,
    async stop() {
      for (const p of procs) p.kill("SIGTERM");
      await Promise.all(procs.map((p) => p.exited));
      upstream.stop(true);
    },
  };
}

const CHAT = JSON.stringify({ model: "m", messages: [{ role: "user", content: "hello" }] });

/**
 * One chat completion through the client proxy on `port`, at notarization `level` (none when undefined):
 * throws unless it is answered 200 with a statement (and a receipt at signRequest).
 */
export async function notarizedCall(port: number, level?: string): Promise<void> {
  const r = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(level ? { "svc-notarization-level": level } : {}) },
    body: CHAT,
  });
  await r.arrayBuffer();
  if (r.status !== 200) throw new Error(`status ${r.status}`);
  if (level && !r.headers.get("svc-workload-id")) throw new Error("no statement");
  if (level === "signRequest" && !r.headers.get("svc-receipt-id")) throw new Error("no receipt");
}
