import { Database } from "bun:sqlite";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { createServer, type ServerResponse } from "node:http";
import { join } from "node:path";
import OpenAI, { APIError } from "openai";
import { onlyProd, prodId, tempDir, webAndPodApis } from "../support/dev-api.ts";
import { writeKubeconfig } from "../support/kubeconfig.ts";
import { metricValue } from "../support/metrics.ts";
import { freePort } from "../support/net.ts";
import { BUN, type Proc, runToEnd, stopAll } from "../support/proc.ts";
import { logLines, startSvcProxy, waitForLog } from "../support/proxy.ts";
import { waitUntil } from "../support/wait.ts";

/**
 * Streamed chat completions through a client proxy with the openai middleware and the notary (pod
 * identities from development Workload APIs; the cluster API that answers the notary's pod look-up is a
 * small server, as in notary-cluster-faults.test.ts; tests/e2e/notary.e2e.test.ts runs the same against
 * kube-apiserver and SPIRE): the official openai client, `svc curl -N`, `svc notary verify`, and targets
 * that misbehave.
 */
const dir = tempDir("svc-openai-stream-");
const pod = { name: "llm-0", uid: "0b7d4c1e-0000-4000-8000-000000000002" };
const llmId = `${prodId("llm")}/pod/${pod.name}/${pod.uid}`;
const clusterApi = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch: () =>
    Response.json({
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: pod.name, namespace: "prod", uid: pod.uid },
      spec: { serviceAccountName: "llm", containers: [{ name: "llm", image: "llm:1" }] },
    }),
});

/** What the target has done, in order, and the gates a scenario waits on before going on. */
const seen: string[] = [];
let release: () => void = () => {};
let gate = Promise.resolve();
const newGate = () => {
  gate = new Promise<void>((r) => {
    release = r;
  });
};
/** Responses a scenario leaves open (stall, abort), closed after the test. */
const open = new Set<ServerResponse>();

const chunk = (delta: object, extra: object = {}) =>
  JSON.stringify({
    id: "chatcmpl-s",
    object: "chat.completion.chunk",
    created: 1_700_000_000,
    model: "m",
    choices: [{ index: 0, delta, finish_reason: null }],
    internal_trace: "must not leave the proxy",
    ...extra,
  });

const target = createServer((req, res) => {
  let body = "";
  req.on("data", (d) => {
    body += d;
  });
  req.on("end", async () => {
    const request = JSON.parse(body) as { messages: { content: string }[]; stream?: boolean };
    const scenario = request.messages.at(-1)?.content ?? "";
    if (scenario === "not-sse") {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ id: "x", object: "chat.completion", choices: [] }));
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    open.add(res);
    res.on("close", () => open.delete(res));
    const send = (text: string) => res.write(text);
    // Three line-end styles and `data:` without a space, as the SSE specification allows.
    send(`data: ${chunk({ role: "assistant", content: "" })}\r\n\r\n`);
    send(`data:${chunk({ content: "one" })}\r\r`);
    send(": keep-alive\n\n");
    send(`data: ${chunk({ content: " two" })}\n\n`);
    switch (scenario) {
      case "count":
        seen.push("target: sent two, waiting");
        await gate;
        seen.push("target: sending the rest");
        send(`data: ${chunk({ content: " three" })}\n\n`);
        send(`data: ${chunk({}, { choices: [{ index: 0, delta: {}, finish_reason: "stop" }] })}\n\n`);
        send(
          `data: ${chunk({}, { choices: [], usage: { prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 } })}\n\n`,
        );
        send("data: [DONE]\n\n");
        res.end();
        return;
      case "bad-json":
        send("data: {not json\n\n");
        return;
      case "not-chunk":
        send('data: {"choices": "all of them"}\n\n');
        return;
      case "huge":
        send(`data: ${"x".repeat(2 * 1024 * 1024)}\n\n`);
        return;
      case "cut":
        send('data: {"id": "chatcmpl-s", "choices": [');
        res.end();
        return;
      case "error":
        send('data: {"error": {"message": "overloaded", "type": "server_error", "internal": "x"}}\n\n');
        return;
      case "flood": {
        // 64 KiB events as fast as the proxy takes them, up to 48 MiB (under the 64 MiB bound).
        const big = `data: ${chunk({ content: "y".repeat(64 * 1024) })}\n\n`;
        res.on("close", () => seen.push("target: flood closed"));
        for (let sent = 0; sent < 48 * 1024 * 1024 && !res.destroyed; sent += big.length)
          if (!res.write(big)) await new Promise((r) => res.once("drain", r).once("close", r));
        if (!res.destroyed) {
          seen.push("target: flood sent whole");
          res.end();
        }
        return;
      }
      case "deep":
        // Nesting that JSON.parse reads and JSON.stringify cannot write, in a field the model keeps whole.
        send(
          `data: ${chunk({}, { choices: [{ index: 0, delta: {}, logprobs: JSON.parse("[".repeat(20_000) + "]".repeat(20_000)) }] })}\n\n`,
        );
        return;
      case "typed":
        send(`event: thread.message\ndata: ${chunk({ content: " hidden" })}\n\n`);
        return;
      case "reset":
        res.socket?.destroy();
        return;
      case "after-done":
        // [DONE], then more, and the answer held open: the stream ends at [DONE].
        send("data: [DONE]\n\n");
        send(`data: ${chunk({ content: " after" })}\n\n`);
        seen.push("target: holding after [DONE]");
        return;
      case "hold":
        // Stalls (or waits for its caller to leave) after the first events.
        seen.push("target: holding");
        return;
    }
  });
});

const ports = { client: 0, short: 0, server: 0, metrics: 0 };
let proxy: Proc;
const db = join(dir, "notary.db");
const socket = `unix://${join(dir, "web.sock")}`;

beforeAll(async () => {
  await new Promise<void>((r) => target.listen(0, "127.0.0.1", () => r()));
  const targetPort = (target.address() as { port: number }).port;
  const { pod: llmApi } = await webAndPodApis(dir, llmId);
  for (const k of Object.keys(ports)) ports[k as keyof typeof ports] = await freePort();
  await startSvcProxy({
    spiffe: { workload_socket_path: llmApi.socket },
    metricsAddr: "0",
    listeners: [
      {
        name: "llm-in",
        address: `127.0.0.1:${ports.server}`,
        mode: "server",
        target: { url: `http://127.0.0.1:${targetPort}` },
        source: { spiffe_ids: onlyProd("web") },
      },
    ],
  });
  const kubeconfig = writeKubeconfig(
    join(dir, "kubeconfig"),
    { server: `http://127.0.0.1:${clusterApi.port}`, "insecure-skip-tls-verify": true },
    { token: "t" },
  );
  const listener = (name: string, port: number, extra: object = {}) => ({
    name,
    address: `127.0.0.1:${port}`,
    mode: "client",
    target: { url: `https://127.0.0.1:${ports.server}`, spiffe_ids: [`^${prodId("llm")}/pod/`] },
    middlewares: [{ type: "notary-query" }, { type: "openai" }],
    ...extra,
  });
  proxy = await startSvcProxy(
    {
      spiffe: { workload_socket_path: socket },
      metricsAddr: `127.0.0.1:${ports.metrics}`,
      notary: { enable: true, database: { path: db } },
      listeners: [
        listener("llm-out", ports.client),
        listener("llm-short", ports.short, { timeouts: { idle: "1s" } }),
      ],
    },
    [],
    { KUBECONFIG: kubeconfig },
  );
}, 60_000);

afterAll(async () => {
  for (const r of open) r.destroy();
  await stopAll();
  target.close();
  clusterApi.stop(true);
  rmSync(dir, { recursive: true, force: true });
});

const client = (port: number, level = "workload") =>
  new OpenAI({
    baseURL: `http://127.0.0.1:${port}/v1`,
    apiKey: "unused",
    maxRetries: 0,
    defaultHeaders: { "svc-notarization-level": level },
  });

const ask = (c: OpenAI, content: string) =>
  c.chat.completions
    .create({ model: "m", stream: true, messages: [{ role: "user", content }] })
    .withResponse();

/** A notary-query answer for a stream, from the client listener. */
async function streamReceipt(streamId: string): Promise<Record<string, unknown>> {
  const r = await fetch(`http://127.0.0.1:${ports.client}/.svc/stream/${streamId}`);
  expect(r.status).toBe(200);
  return (await r.json()) as Record<string, unknown>;
}

const metric = (end: string, listener = "llm-out") =>
  metricValue(ports.metrics, `svc_proxy_openai_streams_total{listener="${listener}",end="${end}"}`);

const svc = (args: string[]) => runToEnd([BUN, "cmd/svc.ts", ...args]);
const bundle = join(dir, "ca", "ca.pem");

describe("streamed chat completions through the openai middleware", () => {
  test("events reach the caller as they arrive, filtered; the receipt covers the whole stream and verifies offline", async () => {
    newGate();
    seen.length = 0;
    const { data: stream, response } = await ask(client(ports.client, "signRequest"), "count");
    const streamId = response.headers.get("svc-stream-id") as string;
    expect(streamId).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(response.headers.get("svc-workload-id")).toBeTruthy();
    const contents: string[] = [];
    const chunks: Record<string, unknown>[] = [];
    for await (const c of stream) {
      chunks.push(c as unknown as Record<string, unknown>);
      const text = c.choices[0]?.delta.content;
      if (text !== undefined && text !== null) contents.push(text);
      if (text === " two") {
        // The target holds the rest until the caller has had " two": a proxy that waited for the whole
        // answer would never get here.
        seen.push("caller: got two");
        release();
      }
    }
    expect(seen).toEqual(["target: sent two, waiting", "caller: got two", "target: sending the rest"]);
    expect(contents.join("")).toBe("one two three");
    expect(chunks.every((c) => !("internal_trace" in c))).toBe(true);
    expect(chunks.at(-1)?.usage).toEqual({ prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 });

    const saved = await streamReceipt(streamId);
    const file = join(dir, "receipt.json");
    writeFileSync(file, JSON.stringify(saved));
    // Its inclusion proof, from the receipt's ID, places it in the notary log.
    const proof = await fetch(`http://127.0.0.1:${ports.client}/.svc/receipt/${saved.id}/proof`);
    expect(proof.status).toBe(200);
    const proofFile = join(dir, "proof.json");
    writeFileSync(proofFile, await proof.text());
    const ok = await svc(["notary", "verify", file, "--bundle", bundle, "--proof", proofFile]);
    expect(ok.err).toContain(
      "verified: signature and chain, the request body, the response body, its place in the notary log",
    );
    expect(ok.code).toBe(0);
    expect(ok.out).toContain("End: done");
    expect(ok.out).toContain("Chunks: 6");

    // One event changed in what the caller received: the receipt no longer matches it.
    const response64 = (saved.response as { bodyBase64: string }).bodyBase64;
    const changed = Buffer.from(response64, "base64").toString().replace(" three", " thre3");
    writeFileSync(
      file,
      JSON.stringify({
        ...saved,
        response: { ...(saved.response as object), bodyBase64: Buffer.from(changed).toString("base64") },
      }),
    );
    const bad = await svc(["notary", "verify", file, "--bundle", bundle]);
    expect(bad.code).toBe(3);
    expect(bad.err).toContain("the response body does not match");
  });

  test("a streamed receipt's assembled message is checked against the events received: one changed word fails", async () => {
    const { checkStreamedBody } = await import("../../lib/notary-objects/chat-stream.ts");
    const { data: stream, response } = await ask(client(ports.client, "signRequest"), "count");
    for await (const _ of stream);
    const saved = await streamReceipt(response.headers.get("svc-stream-id") as string);
    const { decodeJwt } = await import("jose");
    const claims = decodeJwt(saved.receipt as string) as { svc: { response: { stream: never } } };
    const body = Buffer.from((saved.response as { bodyBase64: string }).bodyBase64, "base64");
    expect(() => checkStreamedBody(body, claims.svc.response.stream)).not.toThrow();
    const other = Buffer.from(body.toString().replace(" two", " TWO"));
    expect(() => checkStreamedBody(other, claims.svc.response.stream)).toThrow(
      "the message assembled from the response's events",
    );
  });

  test("svc curl -N prints the stream as it arrives and exits 0 with a verified receipt; 3 when the receipt is not this stream's", async () => {
    newGate();
    release();
    const args = [
      "curl",
      "-N",
      "-n",
      "signRequest",
      "--print-receipt",
      "--spiffe-socket-path",
      socket,
      "-d",
      JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: "count" }] }),
      `http://127.0.0.1:${ports.client}/v1/chat/completions`,
    ];
    const ok = await svc(args);
    expect(ok.err).toContain("verified");
    expect(ok.code).toBe(0);
    // The receipt is printed after the stream, with its stream.
    expect(ok.out.indexOf("data: [DONE]")).toBeLessThan(ok.out.indexOf("Receipt "));
    expect(ok.out).toContain("End: done");
    expect(ok.out).toContain('"content":" three"');
    expect(ok.out).toContain("data: [DONE]");
    expect(ok.err).toMatch(/receipt \S{43} verified/);

    // Whoever can write the database points every stream at one receipt: svc curl finds it is another's.
    const d = new Database(db);
    d.run(
      "CREATE TRIGGER swap AFTER INSERT ON receipt_streams BEGIN UPDATE receipt_streams SET receipt_id = (SELECT id FROM receipts ORDER BY created_at LIMIT 1) WHERE stream_id = NEW.stream_id; END",
    );
    d.close();
    try {
      const bad = await svc(args);
      expect(bad.code).toBe(3);
      expect(bad.err).toContain("receipt verification failed");
      expect(bad.err).toContain("the body printed above is not vouched for");
    } finally {
      const d2 = new Database(db);
      d2.run("DROP TRIGGER swap");
      d2.close();
    }
  });

  test("a caller that leaves mid-stream gets a receipt that says so", async () => {
    seen.length = 0;
    const controller = new AbortController();
    const { data: stream, response } = await client(ports.client, "signRequest")
      .chat.completions.create(
        { model: "m", stream: true, messages: [{ role: "user", content: "hold" }] },
        { signal: controller.signal },
      )
      .withResponse();
    const streamId = response.headers.get("svc-stream-id") as string;
    for await (const c of stream)
      if (c.choices[0]?.delta.content === " two") {
        controller.abort();
        break;
      }
    // The receipt is written once the proxy sees the caller go.
    let saved: Record<string, unknown> | undefined;
    await waitUntil(
      "the receipt of the abandoned stream",
      async () => {
        const r = await fetch(`http://127.0.0.1:${ports.client}/.svc/stream/${streamId}`);
        if (r.status === 200) saved = (await r.json()) as Record<string, unknown>;
        return saved !== undefined;
      },
      10_000,
    );
    const { decodeJwt } = await import("jose");
    const claims = decodeJwt(saved?.receipt as string) as {
      svc: { response: { stream: { end: string; chunks: number } } };
    };
    expect(claims.svc.response.stream.end).toBe("caller_gone");
    expect(claims.svc.response.stream.chunks).toBe(3);
    expect(await metric("caller_gone")).toBe(1);
  });
  test("logRequest keeps the stream as the caller received it, without a Svc-Stream-ID", async () => {
    newGate();
    release();
    const { data: stream, response } = await client(ports.client, "logRequest")
      .chat.completions.create(
        { model: "m", stream: true, messages: [{ role: "user", content: "count" }] },
        { headers: { "x-request-id": "stream-log-1" } },
      )
      .withResponse();
    for await (const _ of stream);
    expect(response.headers.get("svc-stream-id")).toBeNull();
    expect(response.headers.get("svc-workload-id")).toBeTruthy();
    const d = new Database(db, { readonly: true });
    const row = d
      .query("SELECT level, response_body FROM exchanges WHERE request_id = ?")
      .get("stream-log-1") as {
      level: string;
      response_body: Uint8Array;
    };
    d.close();
    expect(row.level).toBe("logRequest");
    const body = new TextDecoder().decode(row.response_body);
    expect(body).toContain('"content":" three"');
    expect(body).not.toContain("internal_trace");
    expect(body.endsWith("data: [DONE]\n\n")).toBe(true);
  });
});

describe("targets that misbehave end that stream, with an error event, a log line and a metric", () => {
  const failure = async (port: number, scenario: string) => {
    const { data: stream } = await ask(client(port), scenario);
    const got: string[] = [];
    try {
      for await (const c of stream) got.push(c.choices[0]?.delta.content ?? "");
    } catch (e) {
      return { got, error: e as Error };
    }
    return { got, error: undefined };
  };

  for (const [scenario, end, message] of [
    ["bad-json", "invalid_event", "event 4 from the target is not JSON"],
    [
      "not-chunk",
      "invalid_event",
      "event 4 from the target is not a chat-completion chunk: no choices array",
    ],
    ["huge", "too_large", "an event is larger than 1048576 characters"],
    ["cut", "target_failed", "the target's stream stopped in the middle of an event"],
    ["error", "target_error", "overloaded"],
    ["deep", "invalid_event", "event 4 from the target is not a chat-completion chunk: it nests"],
    ["typed", "invalid_event", 'event 4 from the target has the type "thread.message"'],
    ["reset", "target_failed", "the target's stream"],
  ] as const)
    test(`${scenario}: ${end}`, async () => {
      const r = await failure(ports.client, scenario);
      // The events before the fault reached the caller.
      expect(r.got).toEqual(["", "one", " two"]);
      expect(r.error).toBeInstanceOf(APIError);
      expect(r.error?.message).toContain(message);
      if (scenario === "error") expect(r.error?.message).not.toContain("internal");
      await waitForLog(proxy, "openai: stream ended", 10_000, { end });
      expect(await metric(end)).toBeGreaterThan(0);
    });

  test("the stream ends at [DONE]: what the target sends after it is not passed on, and the caller is not held", async () => {
    seen.length = 0;
    const r = await fetch(`http://127.0.0.1:${ports.client}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: "after-done" }] }),
    });
    const text = await r.text();
    expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
    expect(text).not.toContain("after");
    expect(seen).toContain("target: holding after [DONE]");
  });

  test("a target that goes quiet for timeouts.idle: stalled", async () => {
    const r = await failure(ports.short, "hold");
    expect(r.got).toEqual(["", "one", " two"]);
    expect(r.error?.message).toContain("the target sent nothing for 1000 ms (timeouts.idle)");
    await waitForLog(proxy, "openai: stream ended", 10_000, { end: "stalled" });
  });

  test("a caller that reads nothing for timeouts.idle has its answer cut off and the target's released", async () => {
    seen.length = 0;
    const { connect } = await import("node:net");
    const sock = connect(ports.short, "127.0.0.1");
    await new Promise((r) => sock.once("connect", r));
    const request = JSON.stringify({
      model: "m",
      stream: true,
      messages: [{ role: "user", content: "flood" }],
    });
    sock.write(
      `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${request.length}\r\n\r\n${request}`,
    );
    sock.pause();
    const line = await waitForLog(proxy, "openai: stream ended", 30_000, {
      end: "stalled",
      reason: "the caller read nothing for 1000 ms (timeouts.idle)",
    });
    expect(line.level).toBe("warn");
    await waitUntil("the target's answer released", () => seen.includes("target: flood closed"), 10_000);
    expect(seen).not.toContain("target: flood sent whole");
    // The caller's doing, said once by the middleware: not logged as the target's failure.
    expect(
      logLines(proxy).filter(
        (l) => l.msg === "upstream failure" && String(l.reason).includes("read nothing"),
      ),
    ).toEqual([]);
    sock.destroy();
  });

  test("a target that answers a streamed request with JSON: 502, and the listener goes on serving", async () => {
    const r = await fetch(`http://127.0.0.1:${ports.client}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: "not-sse" }] }),
    });
    expect(r.status).toBe(502);
    expect(await r.text()).toContain(
      'openai: the target answered a streamed request ("stream": true) with Content-Type "application/json", not text/event-stream',
    );
    expect(await metric("not_sse")).toBe(1);
    newGate();
    release();
    const { data: stream } = await ask(client(ports.client), "count");
    const contents: string[] = [];
    for await (const c of stream) contents.push(c.choices[0]?.delta.content ?? "");
    expect(contents.join("")).toBe("one two three");
    expect(proxy.stderr()).not.toContain("middleware failed");
  });

  test('"stream" that is not a boolean is refused before the target', async () => {
    const r = await fetch(`http://127.0.0.1:${ports.client}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "m", stream: "true", messages: [] }),
    });
    expect(r.status).toBe(400);
    expect(await r.text()).toContain('openai: "stream": "true" is not a boolean');
  });
});
