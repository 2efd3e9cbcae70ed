import { join } from "node:path";
import { ROOT } from "./proc.ts";

let built = false;

/**
 * The path of a compiled executable, `dist/svc` or `dist/svc-proxy`, as users run it. The first call in a
 * test process runs `make build`, which rebuilds only when a source changed, so a test never runs a stale
 * binary.
 */
export function compiled(name: "svc" | "svc-proxy"): string {
  if (!built) {
    const r = Bun.spawnSync(["make", "build"], { cwd: ROOT });
    if (r.exitCode !== 0) throw new Error(`make build failed:\n${r.stdout}\n${r.stderr}`);
    built = true;
  }
  return join(ROOT, "dist", name);
}
