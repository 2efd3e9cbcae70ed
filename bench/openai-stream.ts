/**
 * Streamed chat completions through one client-mode svc-proxy: the openai middleware (each event parsed,
 * filtered and checked, docs/openai.md "Streaming") against the same stream through a listener without
 * middlewares (the relay, which passes bytes), and through the full path without reading the events (the
 * dummy middleware: what the HTTP server and client of the full path cost alone). A Bun target in this process streams --events chunks per
 * answer, each written on its own turn of the event loop (as a model's tokens arrive); --concurrency
 * callers in this process read them with fetch. The setups alternate A B A B over --rounds rounds; reports
 * medians (with the range) of the time to the first event and to the last, and the proxy's CPU µs per
 * event (user + system from /proc), and the ratios. Needs `make build`.
 *
 *   bun bench/openai-stream.ts [--rounds 5] [--streams 200] [--events 100] [--concurrency 8]
 *                              [--out bench/results/openai-stream.md]
 */
import { parseArgs } from "node:util";
import { freePort, waitForPort } from "../tests/support/net.ts";
import { cpuUs, median, range, ratio } from "./stats.ts";
import { BenchRun, report } from "./support.ts";

const { values: o } = parseArgs({
  options: {
    rounds: { type: "string", default: "5" },
    streams: { type: "string", default: "200" },
    events: { type: "string", default: "100" },
    concurrency: { type: "string", default: "8" },
    out: { type: "string" },
  },
});
const [ROUNDS, STREAMS, EVENTS, CONCURRENCY] = [o.rounds, o.streams, o.events, o.concurrency].map(Number) as [
  number,
  number,
  number,
  number,
];

const chunk = (i: number) =>
  `data: ${JSON.stringify({
    id: "chatcmpl-bench",
    object: "chat.completion.chunk",
    created: 1_700_000_000,
    model: "m",
    system_fingerprint: "fp",
    choices: [{ index: 0, delta: { content: ` token${i}` }, logprobs: null, finish_reason: null }],
  })}\n\n`;
const encoder = new TextEncoder();
const target = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch: () =>
    new Response(
      new ReadableStream({
        async pull(c) {
          for (let i = 0; i < EVENTS; i++) {
            c.enqueue(encoder.encode(chunk(i)));
            await new Promise((r) => setImmediate(r));
          }
          c.enqueue(encoder.encode("data: [DONE]\n\n"));
          c.close();
        },
      }),
      { headers: { "content-type": "text/event-stream", "cache-control": "no-cache" } },
    ),
});

const body = JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: "count" }] });

/** One stream: ms to its first event and to its end; the events read (to check nothing was lost). */
async function stream(port: number): Promise<{ first: number; last: number; events: number }> {
  const t = performance.now();
  const r = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
  });
  if (r.status !== 200) throw new Error(`status ${r.status}: ${await r.text()}`);
  const reader = (r.body as ReadableStream<Uint8Array>).getReader();
  let first = 0;
  let text = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (!first) first = performance.now() - t;
    text += new TextDecoder().decode(value);
  }
  return { first, last: performance.now() - t, events: text.split("\n\n").length - 1 };
}

interface Setup {
  name: string;
  port: number;
  pid: number;
  first: number[];
  last: number[];
  cpu: number[];
}

const run = new BenchRun();
try {
  await run.workloadApis(["client"]);
  const setups: Setup[] = [];
  for (const [name, middlewares] of [
    ["openai middleware", [{ type: "openai" }]],
    ["full path, events not read (dummy middleware)", [{ type: "dummy" }]],
    ["no middleware (relay)", []],
  ] as const) {
    const port = await freePort();
    const p = run.svcProxy("client", {
      name: "l",
      address: `127.0.0.1:${port}`,
      mode: "client",
      target: { url: `http://127.0.0.1:${target.port}` },
      middlewares,
    });
    setups.push({ name, port, pid: p.pid, first: [], last: [], cpu: [] });
  }
  for (const s of setups) await waitForPort(s.port);
  for (const s of setups) for (let i = 0; i < 20; i++) await stream(s.port); // warm-up

  for (let round = 0; round < ROUNDS; round++)
    for (const s of setups) {
      const before = cpuUs(s.pid);
      const results: { first: number; last: number; events: number }[] = [];
      let next = 0;
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          while (next < STREAMS) {
            next++;
            results.push(await stream(s.port));
          }
        }),
      );
      const events = results.reduce((n, r) => n + r.events, 0);
      if (events !== STREAMS * (EVENTS + 1))
        throw new Error(`${s.name}: ${events} events read, ${STREAMS * (EVENTS + 1)} sent`);
      s.cpu.push((cpuUs(s.pid) - before) / events);
      s.first.push(median(results.map((r) => r.first)));
      s.last.push(median(results.map((r) => r.last)));
    }

  const [mw, full, relay] = setups as [Setup, Setup, Setup];
  const row = (s: Setup) =>
    `| ${s.name} | ${median(s.first).toFixed(2)} (${range(s.first, 2)}) | ${median(s.last).toFixed(2)} (${range(s.last, 2)}) | ${median(s.cpu).toFixed(2)} (${range(s.cpu, 2)}) |`;
  report(
    [
      "# Streamed chat completions through the openai middleware (bench/openai-stream.ts)",
      "",
      `${new Date().toISOString().slice(0, 10)}; one client-mode svc-proxy (dist/svc-proxy) → a Bun target streaming ${EVENTS} chunks and [DONE] per answer, each on its own event-loop turn; ${CONCURRENCY} callers, ${STREAMS} streams per round, ${ROUNDS} rounds alternating the setups. Medians of the rounds (range); a round's time figures are the median over its streams.`,
      "",
      "| setup | first event ms | last event ms | proxy CPU µs per event |",
      "|---|---:|---:|---:|",
      row(mw),
      row(full),
      row(relay),
      "",
      `Middleware ÷ relay: first event ${ratio(median(mw.first), median(relay.first))}×, last event ${ratio(median(mw.last), median(relay.last))}×, CPU per event ${ratio(median(mw.cpu), median(relay.cpu))}×. Middleware ÷ full path without reading events: CPU per event ${ratio(median(mw.cpu), median(full.cpu))}×.`,
      "",
    ],
    o.out,
  );
} finally {
  target.stop(true);
  await run.stop();
}
