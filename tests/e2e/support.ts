import { afterAll, beforeAll } from "bun:test";
import { chownSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { type Proc, spawnProc } from "../support/proc.ts";
import { down, readTestbed, TESTBED_DIR, type Testbed, up } from "./testbed/index.ts";
import { asWorkload, type Workload } from "./testbed/spire.ts";

/**
 * The test bed for one e2e test file: the one `make testbed-up` started, or a new one that is stopped
 * after the file (its logs stay in .testbed/logs for a look after a failure).
 */
export function useTestbed(): () => Testbed {
  let tb: Testbed | undefined;
  let owned = false;
  beforeAll(async () => {
    tb = readTestbed();
    if (!tb) {
      tb = await up(TESTBED_DIR, (m) => process.stderr.write(`testbed: ${m}\n`));
      owned = true;
    }
  }, 300_000);
  afterAll(async () => {
    if (owned) await down(tb, true);
  });
  return () => {
    if (!tb) throw new Error("test bed not started");
    return tb;
  };
}

/** Runs `cmd` as the workload's unix uid, so the SPIRE agent attests it as that pod. */
export function spawnAsWorkload(
  tb: Testbed,
  w: Workload,
  cmd: string[],
  env: Record<string, string> = {},
): Proc {
  const home = join(tb.dir, "home", w.name);
  mkdirSync(home, { recursive: true });
  chownSync(home, w.uid, w.uid);
  return spawnProc(asWorkload(w, cmd), {
    HOME: home,
    TMPDIR: home,
    SPIFFE_ENDPOINT_SOCKET: `unix://${tb.spire.agentSocket}`,
    ...env,
  });
}

export function workload(tb: Testbed, name: string): Workload {
  const w = tb.spire.workloads[name];
  if (!w)
    throw new Error(`no test bed workload ${name} (have: ${Object.keys(tb.spire.workloads).join(", ")})`);
  return w;
}
