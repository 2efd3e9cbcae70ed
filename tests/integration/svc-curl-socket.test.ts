import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { type DevApi, startDevApi, tempDir } from "../support/dev-api.ts";
import { BUN, ROOT, runToEnd } from "../support/proc.ts";

/**
 * `svc curl` and its Workload API socket: a path that does not exist is reported at once, naming it and
 * how to point svc at one, before any request is sent; an existing socket is used as before.
 */
const dir = tempDir("svc-curl-socket-");
let requests = 0;
const server = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch: (req) => {
    requests++;
    const path = new URL(req.url).pathname;
    // A statement that is not even a JWS, and an error answer.
    if (path === "/malformed")
      return new Response("secret\n", {
        headers: { "svc-workload-id": "abc", "svc-workload-statement": "{not json" },
      });
    if (path === "/missing") return new Response("not here\n", { status: 404 });
    if (path === "/method") return new Response(req.method, { headers: { "x-seen": "yes" } });
    return new Response("hello\n");
  },
});
let api: DevApi;
beforeAll(async () => {
  api = await startDevApi({
    socketPath: join(dir, "api.sock"),
    spiffeIds: ["spiffe://example.org/ns/a/sa/caller"],
    caDir: join(dir, "ca"),
  });
});
afterAll(async () => {
  server.stop(true);
  await api?.proc.stop();
  rmSync(dir, { recursive: true, force: true });
});

async function curl(args: string[], env: Record<string, string> = {}) {
  const { SPIFFE_ENDPOINT_SOCKET: _, ...inherited } = process.env;
  return runToEnd([BUN, "cmd/svc.ts", "curl", ...args], { cwd: ROOT, env: { ...inherited, ...env } });
}

const hint =
  "point svc at yours with --spiffe-socket-path=unix:///path/to/agent.sock or SPIFFE_ENDPOINT_SOCKET=unix:///path/to/agent.sock";

describe("svc curl: the Workload API socket", () => {
  test("a socket path that does not exist fails with exit 1, naming it and where it came from, before any request", async () => {
    const absent = join(dir, "absent.sock");
    const url = `http://127.0.0.1:${server.port}/`;
    expect(await curl(["--spiffe-socket-path", `unix://${absent}`, url])).toEqual({
      code: 1,
      out: "",
      err: `svc: Workload API socket ${absent} does not exist (set by --spiffe-socket-path); ${hint}\n`,
    });
    expect(await curl([url], { SPIFFE_ENDPOINT_SOCKET: absent })).toEqual({
      code: 1,
      out: "",
      err: `svc: Workload API socket ${absent} does not exist (set by SPIFFE_ENDPOINT_SOCKET); ${hint}\n`,
    });
    const inMissingDir = join(dir, "no-such-dir", "agent.sock");
    expect(
      (await curl(["--spiffe-socket-path", inMissingDir, "--validate=false", "https://127.0.0.1:1/"])).err,
    ).toBe(
      `svc: Workload API socket ${inMissingDir} does not exist (set by --spiffe-socket-path); ${hint}\n`,
    );
    if (!existsSync("/spiffe-workload-api/agent.sock"))
      expect((await curl([url])).err).toBe(
        `svc: Workload API socket /spiffe-workload-api/agent.sock does not exist (the default); ${hint}\n`,
      );
    expect(requests).toBe(0);
  });

  test("an existing socket is used: the plain server is asked, and fails validation with exit 2", async () => {
    const r = await curl(["--spiffe-socket-path", api.socket, `http://127.0.0.1:${server.port}/`]);
    expect(r.err).toContain("but the response has no Svc-Workload-ID header");
    expect(r.code).toBe(2);
    // Nothing of an unverified response reaches stdout.
    expect(r.out).toBe("");
  });

  test("a malformed statement is a statement failure (exit 2), and nothing reaches stdout", async () => {
    const url = `http://127.0.0.1:${server.port}/malformed`;
    const r = await curl(["--spiffe-socket-path", api.socket, url]);
    expect(r.code).toBe(2);
    expect(r.out).toBe("");
    expect(r.err).toStartWith("svc: workload statement verification failed");
    const json = await curl(["--spiffe-socket-path", api.socket, "-o", "json", url]);
    expect(json.code).toBe(2);
    const printed = JSON.parse(json.out);
    expect(printed.status).toBe(200);
    expect(printed.error.code).toBe("statement");
    expect(printed.workload).toBeUndefined();
  });

  test("an error response goes to stderr when validation is on (exit 4), to stdout without it", async () => {
    const url = `http://127.0.0.1:${server.port}/missing`;
    const strict = await curl(["--spiffe-socket-path", api.socket, url]);
    expect(strict.code).toBe(4);
    expect(strict.out).toBe("");
    expect(strict.err).toBe(`not here\nsvc: HTTP error: 404 Not Found from ${url}\n`);
    const plain = await curl(["--validate=false", url]);
    expect(plain.code).toBe(4);
    expect(plain.out).toBe("not here\n");
  });

  test("global flags: -v and --log-level log on stderr, --log-format json, bad values are usage errors", async () => {
    const url = `http://127.0.0.1:${server.port}/`;
    const quiet = await curl(["--validate=false", url]);
    expect(quiet.err).toBe("");
    const verbose = await curl(["--validate=false", "-v", "1", url]);
    expect(verbose.out).toBe("hello\n");
    expect(verbose.err).toContain(`svc: debug: request method=GET url=${url} notarization=none`);
    expect(verbose.err).toMatch(/svc: debug: response status=200 ms=\d+/);
    const json = await curl(["--validate=false", "--log-level", "debug", "--log-format", "json", url]);
    const lines = json.err
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(lines.map((l) => [l.level, l.msg])).toEqual([
      ["debug", "request"],
      ["debug", "response"],
    ]);
    expect(lines[1].status).toBe(200);
    for (const [args, message] of [
      [["--log-format", "xml"], '--log-format "xml": allowed are text, json'],
      [["--log-level", "loud"], '--log-level "loud": allowed are debug, info, warn, error'],
      [["-v", "high"], '--verbose "high": expected a whole number (default -2)'],
    ] as const) {
      expect(await curl([...args, "--validate=false", url])).toEqual({
        code: 1,
        out: "",
        err: `svc: ${message}\n`,
      });
    }
  });

  test("--log-stacktrace and SVC_DEBUG=true add the stack to an error; without them one line", async () => {
    const url = `http://127.0.0.1:${server.port}/missing`;
    const plain = await curl(["--validate=false", url]);
    expect(plain.err).toBe(`svc: HTTP error: 404 Not Found from ${url}\n`);
    for (const r of [
      await curl(["--validate=false", "--log-stacktrace", url]),
      await curl(["--validate=false", url], { SVC_DEBUG: "true" }),
    ]) {
      expect(r.code).toBe(4);
      expect(r.err).toStartWith(`svc: HTTP error: 404 Not Found from ${url}\n`);
      expect(r.err).toMatch(/\n\s+at .*curl\.ts/);
    }
  });

  test("-i shows the status line and headers before the body; -X sets the method", async () => {
    const url = `http://127.0.0.1:${server.port}/method`;
    const shown = await curl(["--validate=false", "-i", url]);
    expect(shown.code).toBe(0);
    expect(shown.out).toStartWith("HTTP/1.1 200 OK\r\n");
    expect(shown.out).toContain("\r\nx-seen: yes\r\n");
    expect(shown.out).toEndWith("\r\n\r\nGET");
    expect((await curl(["--validate=false", "-X", "PUT", url])).out).toBe("PUT");
    expect((await curl(["--validate=false", "--request", "delete", url])).out).toBe("DELETE");
  });

  test("without validation, plain http needs no Workload API at all", async () => {
    const r = await curl([
      "--spiffe-socket-path",
      join(dir, "absent.sock"),
      "--validate=false",
      `http://127.0.0.1:${server.port}/`,
    ]);
    expect(r).toEqual({ code: 0, out: "hello\n", err: "" });
  });
});
