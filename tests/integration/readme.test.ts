import { beforeAll, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { compiled } from "../support/compiled.ts";
import { ROOT } from "../support/proc.ts";
import { readmeBlock } from "../support/readme.ts";

/**
 * README.md's svc-proxy quick start, run as written (bash, from the repository root, with the built
 * binaries): web's request reaches api through the proxy pair, and api sees web's SPIFFE ID.
 */
// make build, once per test process: it rebuilds only what changed.
beforeAll(() => {
  compiled("svc");
}, 120_000);

test("the svc-proxy quick start runs as written", async () => {
  rmSync("/tmp/svc-quickstart", { recursive: true, force: true });
  // In a process group of its own, ended whole afterwards: a block that fails half-way leaves nothing.
  const p = Bun.spawn(["setsid", "timeout", "60", "bash", "-e", "-c", readmeBlock("svc-proxy:")], {
    cwd: ROOT,
    stdout: "pipe",
    stderr: "pipe",
  });
  const code = await p.exited;
  try {
    process.kill(-p.pid, "SIGKILL");
  } catch {}
  const out = await new Response(p.stdout).text();
  expect({ code, hello: out.includes("hello, spiffe://example.org/ns/shop/sa/web") }).toEqual({
    code: 0,
    hello: true,
  });
  rmSync("/tmp/svc-quickstart", { recursive: true, force: true });
}, 90_000);
