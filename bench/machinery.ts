/**
 * Which Bun HTTP machinery to build a proxy hop on: one plaintext hop (inbound server → outbound client)
 * in front of the same Bun upstream, for the four combinations of node:http / Bun.serve inbound and a
 * node:http keep-alive agent / fetch outbound. Each hop and the upstream run in their own process; wrk
 * drives 16 connections. Needs wrk.   bun bench/machinery.ts [--seconds 4]
 */

import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { spawn } from "bun";

const { values: o } = parseArgs({ options: { seconds: { type: "string", default: "4" } } });
const UP = 18381;
const HOP = 18382;
const upstream = `Bun.serve({ hostname: "127.0.0.1", port: ${UP}, fetch: () => new Response("x".repeat(256)) });`;
const hops: Record<string, string> = {
  "node:http in, node:http agent out": `
import http from "node:http";
const agent = new http.Agent({ keepAlive: true });
http.createServer((req, res) => {
  const out = http.request({ host: "127.0.0.1", port: ${UP}, path: req.url, method: req.method, headers: req.headers, agent }, (r) => {
    res.writeHead(r.statusCode ?? 502, r.headers);
    r.pipe(res);
  });
  req.pipe(out);
}).listen(${HOP}, "127.0.0.1");`,
  "Bun.serve in, fetch out": `
Bun.serve({ hostname: "127.0.0.1", port: ${HOP}, fetch: (req) => {
  const u = new URL(req.url);
  return fetch("http://127.0.0.1:${UP}" + u.pathname + u.search, { method: req.method, headers: req.headers, body: req.body });
} });`,
  "Bun.serve in, node:http agent out": `
import http from "node:http";
import { Readable } from "node:stream";
const agent = new http.Agent({ keepAlive: true });
Bun.serve({ hostname: "127.0.0.1", port: ${HOP}, fetch: (req) => new Promise((resolve) => {
  const u = new URL(req.url);
  const out = http.request({ host: "127.0.0.1", port: ${UP}, path: u.pathname + u.search, method: req.method, headers: Object.fromEntries(req.headers), agent },
    (r) => resolve(new Response(Readable.toWeb(r), { status: r.statusCode, headers: r.headers })));
  if (req.body) Readable.fromWeb(req.body).pipe(out); else out.end();
}) });`,
  "node:http in, fetch out": `
import http from "node:http";
import { Readable } from "node:stream";
http.createServer(async (req, res) => {
  const r = await fetch("http://127.0.0.1:${UP}" + req.url, { method: req.method, headers: req.headers });
  res.writeHead(r.status, Object.fromEntries(r.headers));
  Readable.fromWeb(r.body).pipe(res);
}).listen(${HOP}, "127.0.0.1");`,
};

async function wrk(seconds: string): Promise<number> {
  const p = spawn(["wrk", "-t", "2", "-c", "16", "-d", `${seconds}s`, `http://127.0.0.1:${HOP}/`], {
    stdout: "pipe",
  });
  const out = await new Response(p.stdout).text();
  return Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1]);
}

const dir = mkdtempSync(join(tmpdir(), "svc-machinery-"));
const file = (name: string, text: string) => {
  const path = join(dir, `${name}.ts`);
  writeFileSync(path, text);
  return path;
};
const up = spawn([process.execPath, file("upstream", upstream)]);
try {
  await Bun.sleep(500);
  console.log("| one plaintext hop | requests/s (16 connections) |\n|---|---:|");
  for (const [name, code] of Object.entries(hops)) {
    const hop = spawn([process.execPath, file(name.replace(/\W+/g, "-"), code)]);
    await Bun.sleep(800);
    await wrk("2");
    console.log(`| ${name} | ${(await wrk(o.seconds as string)).toFixed(0)} |`);
    hop.kill();
    await hop.exited;
  }
} finally {
  up.kill();
  rmSync(dir, { recursive: true, force: true });
}
