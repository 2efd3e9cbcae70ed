import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BUN, type Proc, spawnProc } from "./proc.ts";

/** A temporary directory for one test file's sockets, CAs and logs. */
export function tempDir(prefix = "svc-test-"): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

export interface DevApi {
  proc: Proc;
  socket: string;
}

/** Starts `svc dev workload-api` as its own process and waits until it serves. */
export async function startDevApi(o: {
  socketPath: string;
  spiffeIds: string[];
  caDir: string;
  ttl?: string;
  federate?: string[];
}): Promise<DevApi> {
  const args = [
    BUN,
    "cmd/svc.ts",
    "dev",
    "workload-api",
    "--socket",
    `unix://${o.socketPath}`,
    "--spiffe-id",
    o.spiffeIds.join(","),
    "--ca-dir",
    o.caDir,
    "--ttl",
    o.ttl ?? "1h",
  ];
  if (o.federate?.length) args.push("--federate", o.federate.join(","));
  const proc = spawnProc(args);
  await proc.waitFor((l) => l.includes('"socket"'));
  return { proc, socket: `unix://${o.socketPath}` };
}
