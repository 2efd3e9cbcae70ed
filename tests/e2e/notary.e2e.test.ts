import { Database } from "bun:sqlite";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { join } from "node:path";
import OpenAI from "openai";
import { compiled } from "../support/compiled.ts";
import { waitForPort } from "../support/net.ts";
import { ROOT, runToEnd, stopAll } from "../support/proc.ts";
import { exactId, svcProxyAs, useTestbed, workload, workloadHome } from "./support.ts";
import { freePort } from "./testbed/process.ts";
import { asWorkload, STALE_POD_UID, type Workload } from "./testbed/spire.ts";

/**
 * Notarization end to end with SPIRE pod identities and the cluster API: an OpenAI-compatible upstream
 * behind a server proxy running as pod api-0; a client proxy (pod web-0) with the notary, notary-query
 * and openai; calls from the official openai SDK and from `svc curl`; saved objects verified offline.
 */
const testbed = useTestbed();
let upstream: Server;
let upstreamPort: number;
let lastRequest: Record<string, unknown> = {};
let lastHeaders: Record<string, string | string[] | undefined> = {};
const ports = { api: 0, stale: 0, client: 0, staleClient: 0, metrics: 0, central: 0 };
let db: string;
let work: string;

beforeAll(async () => {
  const tb = testbed();
  upstreamPort = await freePort();
  upstream = createServer((req, res) => {
    let body = "";
    req.on("data", (d) => {
      body += d;
    });
    req.on("end", () => {
      // A target that adds headers of its choosing to its answer (a test asks for them in this header).
      const added = JSON.parse(String(req.headers["x-test-answer-headers"] ?? "{}")) as Record<
        string,
        string
      >;
      if (req.url === "/v1/chat/completions" && req.method === "POST") {
        lastRequest = JSON.parse(body);
        lastHeaders = req.headers;
        const messages = lastRequest.messages as { content: string }[];
        if (messages.at(-1)?.content === "plain please") {
          res.writeHead(200, { "content-type": "text/plain", ...added });
          res.end("a plain answer\n");
          return;
        }
        if (lastRequest.stream === true) {
          // A streamed answer: the echo in three chunks, then [DONE].
          res.writeHead(200, { "content-type": "text/event-stream", ...added });
          const words = `echo: ${messages.at(-1)?.content}`.split(/(?= )/);
          for (const [i, content] of words.entries())
            res.write(
              `data: ${JSON.stringify({ id: "chatcmpl-s", object: "chat.completion.chunk", created: 1_700_000_000, model: lastRequest.model, choices: [{ index: 0, delta: i === 0 ? { role: "assistant", content } : { content }, finish_reason: null }], internal_trace: "must not leave the proxy" })}\n\n`,
            );
          res.end(
            `data: ${JSON.stringify({ id: "chatcmpl-s", object: "chat.completion.chunk", created: 1_700_000_000, model: lastRequest.model, choices: [{ index: 0, delta: {}, finish_reason: "stop" }] })}\n\ndata: [DONE]\n\n`,
          );
          return;
        }
        res.writeHead(200, { "content-type": "application/json", ...added });
        res.end(
          JSON.stringify({
            id: "chatcmpl-1",
            object: "chat.completion",
            created: 1_700_000_000,
            model: lastRequest.model,
            choices: [
              {
                index: 0,
                finish_reason: "stop",
                message: { role: "assistant", content: `echo: ${messages.at(-1)?.content}` },
              },
            ],
            usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
            internal_trace: "must not leave the proxy",
          }),
        );
        return;
      }
      res.writeHead(200, { "content-type": "text/plain" });
      res.end("plain upstream\n");
    });
  });
  await new Promise<void>((r) => upstream.listen(upstreamPort, "127.0.0.1", () => r()));
  for (const k of Object.keys(ports)) ports[k as keyof typeof ports] = await freePort();
  const web = workload(tb, "web");
  // The proxy runs as the pod's uid; it gets its own copy of the (root-only) kubeconfig.
  const home = workloadHome(tb, "web", "notary-e2e");
  work = home.dir;
  db = join(work, "notary.db");
  const proxy = (as: string, config: object) => svcProxyAs(tb, as, config, { KUBECONFIG: home.kubeconfig });
  for (const [as, port] of [
    ["api", ports.api],
    ["stale", ports.stale],
  ] as const)
    proxy(as, {
      listeners: [
        {
          name: "in",
          address: `127.0.0.1:${port}`,
          mode: "server",
          target: { url: `http://127.0.0.1:${upstreamPort}` },
          source: { spiffe_ids: [exactId(web.spiffeId)] },
        },
      ],
    });
  const middlewares = [{ type: "notary-query" }, { type: "openai" }];
  proxy("web", {
    metricsAddr: `127.0.0.1:${ports.metrics}`,
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
        middlewares,
      },
      {
        name: "to-stale",
        address: `127.0.0.1:${ports.staleClient}`,
        mode: "client",
        target: { url: `https://127.0.0.1:${ports.stale}` },
        middlewares,
      },
      {
        // Notary queries over SPIFFE mTLS: only pod api-0 may ask (source.spiffe_ids governs /.svc/*).
        name: "central-query",
        address: `127.0.0.1:${ports.central}`,
        mode: "central",
        target: { url: `https://127.0.0.1:${ports.api}` },
        source: { spiffe_ids: [exactId(workload(tb, "api").spiffeId)] },
        middlewares: [{ type: "notary-query" }],
      },
    ],
  });
  for (const p of Object.values(ports)) await waitForPort(p, 60_000);
}, 120_000);

afterAll(async () => {
  await stopAll();
  upstream.close();
});

/** Runs svc as a workload (so it can fetch bundles from the agent) and collects its output. */
async function svc(args: string[], as = "web"): Promise<{ code: number; stdout: string; stderr: string }> {
  const tb = testbed();
  const w: Workload = workload(tb, as);
  const r = await runToEnd(asWorkload(w, [compiled("svc"), ...args]), {
    cwd: ROOT,
    env: { ...process.env, HOME: work, SPIFFE_ENDPOINT_SOCKET: `unix://${tb.spire.agentSocket}` },
  });
  return { code: r.code, stdout: r.out, stderr: r.err };
}

const chat = (content: string) =>
  JSON.stringify({ model: "test-model", messages: [{ role: "user", content }] });

describe("notary with the openai middleware", () => {
  test("the openai SDK gets its completion, filtered both ways, with a workload statement", async () => {
    const client = new OpenAI({ baseURL: `http://127.0.0.1:${ports.client}/v1`, apiKey: "sk-test" });
    const { data, response } = await client.chat.completions
      .create({
        model: "test-model",
        messages: [{ role: "user", content: "hello" }],
        // A field outside the model of the chat-completions API: removed before the upstream sees it.
        ...({ x_unknown_option: 1 } as object),
      })
      .withResponse();
    expect(data.choices[0]?.message.content).toBe("echo: hello");
    expect((data as unknown as Record<string, unknown>).internal_trace).toBeUndefined();
    expect(lastRequest.x_unknown_option).toBeUndefined();
    expect(lastRequest.model).toBe("test-model");
    expect(response.headers.get("svc-workload-id")).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(response.headers.get("svc-receipt-id")).toBeNull();
  });

  test("a streamed answer (the openai SDK, stream: true) is filtered event by event; its receipt, fetched by Svc-Stream-ID, verifies offline; svc curl -N verifies it too", async () => {
    const tb = testbed();
    const client = new OpenAI({
      baseURL: `http://127.0.0.1:${ports.client}/v1`,
      apiKey: "sk-test",
      defaultHeaders: { "svc-notarization-level": "signRequest" },
    });
    const { data: stream, response } = await client.chat.completions
      .create({ model: "test-model", stream: true, messages: [{ role: "user", content: "stream me now" }] })
      .withResponse();
    const pieces: string[] = [];
    for await (const c of stream) {
      expect((c as unknown as Record<string, unknown>).internal_trace).toBeUndefined();
      pieces.push(c.choices[0]?.delta.content ?? "");
    }
    expect(pieces.join("")).toBe("echo: stream me now");
    const streamId = response.headers.get("svc-stream-id") as string;
    const served = await fetch(`http://127.0.0.1:${ports.client}/.svc/stream/${streamId}`);
    expect(served.status).toBe(200);
    const file = join(work, "stream-receipt.json");
    writeFileSync(file, await served.text());
    const ok = await svc(["notary", "verify", file, "--bundle", tb.spire.bundleFile]);
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain("End: done");

    const live = await svc([
      "curl",
      "-N",
      "-n",
      "signRequest",
      "-d",
      JSON.stringify({ model: "test-model", stream: true, messages: [{ role: "user", content: "live" }] }),
      `http://127.0.0.1:${ports.client}/v1/chat/completions`,
    ]);
    expect(live.code).toBe(0);
    expect(live.stdout).toContain("data: [DONE]");
    expect(live.stderr).toMatch(/receipt \S{43} verified/);
  });

  test("svc curl verifies the statement: it names the right pod, UID, service account, images, labels", async () => {
    const tb = testbed();
    const api = workload(tb, "api");
    const r = await svc([
      "curl",
      "-s",
      "-o",
      "json",
      "-d",
      chat("hi"),
      `http://127.0.0.1:${ports.client}/v1/chat/completions`,
    ]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout);
    const s = out.workload.claims;
    expect(s.sub).toBe(api.spiffeId);
    expect(s.iss).toBe(workload(tb, "web").spiffeId);
    expect(s.aud).toBe(`https://127.0.0.1:${ports.api}/workload-statement`);
    expect(s.svc).toMatchObject({
      trustDomain: "svc.test",
      namespace: "alpha",
      serviceAccount: "api",
      podName: "api-0",
      podUid: api.podUid,
      images: ["registry.svc.test/api:1.0"],
      labels: { app: "api" },
      annotations: { "mls.svc.dev/compartment": "us:alpha", "mls.svc.dev/level": "us:ts" },
    });
    expect(out.receipt).toBeUndefined();
  });

  test("--print-workload shows the fields of docs/svc-curl.md", async () => {
    const r = await svc([
      "curl",
      "-s",
      "--print-workload",
      "-d",
      chat("x"),
      `http://127.0.0.1:${ports.client}/v1/chat/completions`,
    ]);
    expect(r.code).toBe(0);
    for (const label of [
      "Trust Domain:",
      "SPIFFE ID:",
      "Namespace:",
      "Service Account:",
      "Pod Name:",
      "Pod UID:",
      "Container Images:",
      "Labels:",
      "Annotations:",
      "Raw Claims:",
    ])
      expect(r.stdout).toContain(label);
    expect(r.stdout).toContain("mls.svc.dev/compartment: us:alpha");
  });

  test("logRequest records the exchange in the notary database", async () => {
    const r = await svc([
      "curl",
      "-s",
      "-n",
      "logRequest",
      "-H",
      "X-Request-Id: e2e-log-1",
      "-d",
      chat("log me"),
      `http://127.0.0.1:${ports.client}/v1/chat/completions`,
    ]);
    expect(r.code).toBe(0);
    const d = new Database(db, { readonly: true });
    const row = d
      .query("SELECT level, status, request_body FROM exchanges WHERE request_id = ?")
      .get("e2e-log-1") as {
      level: string;
      status: number;
      request_body: Uint8Array;
    };
    d.close();
    expect(row.level).toBe("logRequest");
    expect(row.status).toBe(200);
    expect(new TextDecoder().decode(row.request_body)).toBe(chat("log me"));
  });

  test("signRequest: svc curl verifies the receipt; it is served by id and verifies offline; tampering fails", async () => {
    const tb = testbed();
    const r = await svc([
      "curl",
      "-s",
      "-n",
      "signRequest",
      "--print-receipt",
      "-d",
      chat("sign me"),
      `http://127.0.0.1:${ports.client}/v1/chat/completions`,
    ]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("HTTP Request:");
    expect(r.stdout).toContain("Path: /v1/chat/completions");
    const id = /^Receipt (\S+)$/m.exec(r.stdout)?.[1] as string;
    expect(id).toMatch(/^[A-Za-z0-9_-]{43}$/);

    const served = await fetch(`http://127.0.0.1:${ports.client}/.svc/receipt/${id}`);
    expect(served.status).toBe(200);
    const saved = (await served.json()) as Record<string, { bodyBase64: string }> & {
      workloadStatementID: string;
    };
    expect(Buffer.from(saved.request?.bodyBase64 ?? "", "base64").toString()).toBe(chat("sign me"));
    const file = join(work, "receipt.json");
    writeFileSync(file, JSON.stringify(saved));
    const ok = await svc(["notary", "verify", file, "--bundle", tb.spire.bundleFile]);
    expect(ok.stderr).toBe(
      `svc notary verify: receipt ${id} verified: signature and chain, the request body, the response body\n`,
    );
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain(`Receipt ${id}`);

    // svc curl -o json, saved, verifies offline with both bodies.
    const url = `http://127.0.0.1:${ports.client}/v1/chat/completions`;
    const json = await svc(["curl", "-s", "-o", "json", "-n", "signRequest", "-d", chat("saved"), url]);
    expect(json.code).toBe(0);
    const output = join(work, "curl.json");
    writeFileSync(output, json.stdout);
    const offline = await svc(["notary", "verify", output, "--bundle", tb.spire.bundleFile]);
    expect({ code: offline.code, stderr: offline.stderr }).toEqual({
      code: 0,
      stderr: `svc notary verify: receipt ${JSON.parse(json.stdout).receipt.id} verified: signature and chain, the request body, the response body\n`,
    });

    const tampered = structuredClone(saved);
    (tampered.response as { bodyBase64: string }).bodyBase64 =
      Buffer.from('{"forged":true}').toString("base64");
    writeFileSync(file, JSON.stringify(tampered));
    const bad = await svc(["notary", "verify", file, "--bundle", tb.spire.bundleFile]);
    expect(bad.code).toBe(3);
    expect(bad.stderr).toContain("receipt verification failed: the response body does not match");

    const statement = await fetch(
      `http://127.0.0.1:${ports.client}/.svc/workload/${saved.workloadStatementID}`,
    );
    expect(statement.status).toBe(200);
    const sfile = join(work, "statement.json");
    writeFileSync(sfile, await statement.text());
    const sv = await svc(["notary", "verify", sfile, "--bundle", tb.spire.bundleFile]);
    expect(sv.code).toBe(0);
    expect(sv.stdout).toContain("Pod Name:               api-0");
    const claims = JSON.parse(
      Buffer.from(
        (JSON.parse(await Bun.file(sfile).text()).statement as string).split(".")[1] as string,
        "base64url",
      ).toString(),
    );
    const cert = await fetch(`http://127.0.0.1:${ports.client}/.svc/certificate/${claims.svc.certificateID}`);
    expect(((await cert.json()) as { spiffeId: string }).spiffeId).toBe(workload(tb, "api").spiffeId);
  });

  test("a target's own statement and receipt headers never reach the caller: svc curl cannot be handed a replay", async () => {
    const url = `http://127.0.0.1:${ports.client}/v1/chat/completions`;
    const genuine = await svc(["curl", "-s", "-o", "json", "-n", "signRequest", "-d", chat("genuine"), url]);
    expect(genuine.code).toBe(0);
    const g = JSON.parse(genuine.stdout) as {
      workload: { id: string; jws: string };
      receipt: { id: string; jws: string };
    };
    const replay = JSON.stringify({
      "svc-workload-id": g.workload.id,
      "svc-workload-statement": g.workload.jws,
      "svc-receipt-id": g.receipt.id,
      "svc-receipt": g.receipt.jws,
    });
    // A plain answer is not notarized: none of the target's notary headers pass.
    const plain = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", "x-test-answer-headers": replay },
      body: chat("plain please"),
    });
    expect(await plain.text()).toBe("a plain answer\n");
    expect([...plain.headers.keys()].filter((k) => k.startsWith("svc-"))).toEqual([]);
    const refused = await svc([
      "curl",
      "-n",
      "signRequest",
      "-H",
      `x-test-answer-headers: ${replay}`,
      "-d",
      chat("plain please"),
      url,
    ]);
    expect(refused.code).toBe(2);
    expect(refused.stdout).toBe("");
    expect(refused.stderr).toContain("no Svc-Workload-ID header");
    // A notarized answer at the workload level carries the notary's statement and no receipt of the target's.
    const json = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", "x-test-answer-headers": replay },
      body: chat("workload level"),
    });
    expect(json.status).toBe(200);
    expect(json.headers.get("svc-workload-id")).toBe(g.workload.id);
    expect(json.headers.get("svc-receipt-id")).toBeNull();
    expect(json.headers.get("svc-receipt")).toBeNull();
  });

  test("--notary-id pins who may issue the statement: the notary passes, any other issuer fails (2)", async () => {
    const url = `http://127.0.0.1:${ports.client}/v1/chat/completions`;
    const notary = workload(testbed(), "web").spiffeId;
    const pinned = await svc(["curl", "-s", "--notary-id", exactId(notary), "-d", chat("pinned"), url]);
    expect(pinned.stderr).toBe("");
    expect(pinned.code).toBe(0);
    const other = exactId(workload(testbed(), "api").spiffeId);
    const refused = await svc(["curl", "--notary-id", other, "-d", chat("pinned"), url]);
    expect(refused.code).toBe(2);
    expect(refused.stdout).toBe("");
    expect(refused.stderr).toContain(
      `workload statement verification failed: not issued by a notary --notary-id allows: peer ${notary} matches none of 1 allowed pattern(s)`,
    );
    const bad = await svc(["curl", "--notary-id", "(", url]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('--notary-id[0]: invalid pattern "("');
  });

  test("a receipt records the request as the notary forwarded it, under the X-Request-Id svc curl sent", async () => {
    const r = await svc([
      "curl",
      "-s",
      "-o",
      "json",
      "-n",
      "signRequest",
      "-H",
      "X-Request-Id: e2e-receipt-headers",
      "-H",
      "Connection: x-consent",
      "-H",
      "X-Consent: granted",
      "-H",
      "X-Forwarded-For: 6.6.6.6",
      "-H",
      "X-Api-Key: sk-not-for-receipts",
      "-d",
      chat("as forwarded"),
      `http://127.0.0.1:${ports.client}/v1/chat/completions`,
    ]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const svcClaim = (
      JSON.parse(r.stdout) as {
        receipt: { claims: { svc: { requestID: string; request: { headers: Record<string, string> } } } };
      }
    ).receipt.claims.svc;
    expect(svcClaim.requestID).toBe("e2e-receipt-headers");
    const recorded = svcClaim.request.headers;
    // As forwarded: no field that Connection names, and X-Forwarded-For with the hop added.
    expect(lastHeaders["x-consent"]).toBeUndefined();
    expect(recorded["x-consent"]).toBeUndefined();
    expect(recorded.connection).toBeUndefined();
    // The notary's proxy added its hop; the server proxy in front of the target adds one more.
    expect(recorded["x-forwarded-for"]).toBe("6.6.6.6, 127.0.0.1");
    expect(lastHeaders["x-forwarded-for"]).toBe("6.6.6.6, 127.0.0.1, 127.0.0.1");
    expect(recorded["x-request-id"]).toBe("e2e-receipt-headers");
    expect(recorded["x-api-key"]).toBeUndefined();
  });

  test("notary-query on a central listener answers only the callers source.spiffe_ids admits", async () => {
    const url = `https://127.0.0.1:${ports.central}/.svc/receipt/${"A".repeat(43)}`;
    const allowed = await svc(["curl", "--validate=false", url], "api");
    expect(allowed.code).toBe(4);
    expect(allowed.stdout).toContain("notary-query: no receipt with id");
    const refused = await svc(["curl", "--validate=false", url], "stale");
    expect(refused.code).toBe(1);
    expect(refused.stdout).toBe("");
  });

  test("notary-query: 404 for an unknown id, 400 for a malformed one", async () => {
    expect((await fetch(`http://127.0.0.1:${ports.client}/.svc/receipt/${"A".repeat(43)}`)).status).toBe(404);
    const bad = await fetch(`http://127.0.0.1:${ports.client}/.svc/workload/not-an-id`);
    expect(bad.status).toBe(400);
    expect(await bad.text()).toContain("malformed workload id");
  });

  test("a pod whose UID does not match the SPIFFE ID is refused", async () => {
    const r = await svc([
      "curl",
      "-d",
      chat("hi"),
      `http://127.0.0.1:${ports.staleClient}/v1/chat/completions`,
    ]);
    expect(r.code).toBe(4);
    // An error answer is not verified, so its body goes to stderr.
    expect(r.stdout).toBe("");
    expect(r.stderr).toContain(`names UID ${STALE_POD_UID}`);
    expect(r.stderr).toContain("HTTP error: 502");
  });

  test("openai refuses other paths (403) and a stream value that is not a boolean (400); svc curl exits 4", async () => {
    const other = await svc(["curl", `http://127.0.0.1:${ports.client}/v1/models`]);
    expect(other.code).toBe(4);
    expect(other.stderr).toContain("only POST /v1/chat/completions");
    // A stream value a target might read as true is refused: only true asks for a stream.
    for (const value of ["true", 1]) {
      const odd = await fetch(`http://127.0.0.1:${ports.client}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "m", messages: [], stream: value }),
      });
      expect(odd.status).toBe(400);
      expect(await odd.text()).toContain(`"stream": ${JSON.stringify(value)} is not a boolean`);
    }
    const big = await fetch(`http://127.0.0.1:${ports.client}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: chat("x".repeat(1024 * 1024)),
    });
    expect(big.status).toBe(413);
    expect(await big.text()).toContain("over the limit of 1048576 bytes");
  });

  test("svc curl: a server outside the service fails validation (2) unless --validate=false; connection refused is 1", async () => {
    const plain = `http://127.0.0.1:${upstreamPort}/status`;
    const strict = await svc(["curl", plain]);
    expect(strict.code).toBe(2);
    expect(strict.stderr).toContain("no Svc-Workload-ID header");
    const loose = await svc(["curl", "--validate=false", plain]);
    expect(loose.code).toBe(0);
    expect(loose.stdout).toBe("plain upstream\n");
    const refused = await svc(["curl", "--validate=false", `http://127.0.0.1:${await freePort()}/`]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain("network error");
  });

  test("an unknown notarization level is a 400 naming the allowed ones", async () => {
    const r = await fetch(`http://127.0.0.1:${ports.client}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", "svc-notarization-level": "everything" },
      body: chat("x"),
    });
    expect(r.status).toBe(400);
    expect(await r.text()).toContain(
      'unknown notarization level "everything" (allowed: workload, logRequest, signRequest)',
    );
  });

  test("metrics count notary operations and the refused pod", async () => {
    const text = await (await fetch(`http://127.0.0.1:${ports.metrics}/metrics`)).text();
    expect(text).toMatch(/svc_proxy_notary_operations_total\{operation="statement",result="ok"\} [1-9]/);
    expect(text).toMatch(/svc_proxy_notary_operations_total\{operation="receipt",result="ok"\} [1-9]/);
    expect(text).toMatch(/svc_proxy_notary_operations_total\{operation="log",result="ok"\} [1-9]/);
    expect(text).toMatch(
      /svc_proxy_notary_operations_total\{operation="statement",result="pod_mismatch"\} [1-9]/,
    );
    expect(text).toMatch(
      /svc_proxy_denied_total\{listener="to-stale",side="target",reason="pod_mismatch"\} [1-9]/,
    );
  });

  test("an honest signRequest whose body the openai filter changes verifies: the receipt binds both", async () => {
    const sent = JSON.stringify({
      model: "test-model",
      messages: [{ role: "user", content: "hi" }],
      junk: 1,
    });
    const r = await svc([
      "curl",
      "-n",
      "signRequest",
      "-o",
      "json",
      "-d",
      sent,
      `http://127.0.0.1:${ports.client}/v1/chat/completions`,
    ]);
    expect(r.stderr).not.toContain("verification failed");
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout);
    const q = out.receipt.claims.svc.request;
    // What the caller sent, which it checked, and what the upstream got, without the unknown field.
    expect(q.body.length).toBe(Buffer.byteLength(sent));
    expect(q.forwardedBody.length).toBe(Buffer.byteLength(sent) - ',"junk":1'.length);
  });

  test("svc curl exits 3 when the statement verifies but the receipt it asked for is missing", async () => {
    const real = await svc([
      "curl",
      "-o",
      "json",
      "-d",
      chat("hi"),
      `http://127.0.0.1:${ports.client}/v1/chat/completions`,
    ]);
    expect(real.code).toBe(0);
    const { workload } = JSON.parse(real.stdout) as { workload: { id: string; jws: string } };
    // A server that replays a genuine statement but signs nothing: the receipt check must fail.
    const replay = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch: () =>
        new Response("{}", {
          headers: { "svc-workload-id": workload.id, "svc-workload-statement": workload.jws },
        }),
    });
    try {
      const r = await svc([
        "curl",
        "-n",
        "signRequest",
        "-d",
        chat("hi"),
        `http://127.0.0.1:${replay.port}/v1/chat/completions`,
      ]);
      expect(r.code).toBe(3);
      expect(r.stdout).toBe("");
      expect(r.stderr).toContain(
        "receipt verification failed: signRequest was asked for but the response has no Svc-Receipt-ID",
      );
    } finally {
      replay.stop(true);
    }
  });

  test("--print-receipt without signRequest is a usage error", async () => {
    const r = await svc(["curl", "--print-receipt", `http://127.0.0.1:${ports.client}/v1/chat/completions`]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("--print-receipt requires -n signRequest");
  });
});
