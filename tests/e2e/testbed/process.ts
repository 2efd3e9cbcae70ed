import { spawn } from "node:child_process";
import { closeSync, openSync } from "node:fs";

export { freePort } from "../../support/net.ts";

/** Every daemon this process started, in order: a failed `up` stops those it started (index.ts). */
export const startedDaemons: number[] = [];

/**
 * Starts a test bed daemon detached from this process (it outlives `make testbed-up`), with standard output
 * and error appended to `log`. Returns its PID; stop it with stopPid.
 */
export function startDaemon(
  cmd: string,
  args: string[],
  log: string,
  env: Record<string, string> = {},
  cwd?: string,
): number {
  const fd = openSync(log, "a");
  const child = spawn(cmd, args, {
    detached: true,
    stdio: ["ignore", fd, fd],
    env: { ...process.env, ...env },
    ...(cwd ? { cwd } : {}),
  });
  closeSync(fd);
  child.unref();
  if (!child.pid) throw new Error(`could not start ${cmd}`);
  startedDaemons.push(child.pid);
  return child.pid;
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** SIGTERM, then SIGKILL after `graceMs`; resolves when the process is gone. */
export async function stopPid(pid: number, graceMs = 5000): Promise<void> {
  if (!alive(pid)) return;
  try {
    process.kill(pid, "SIGTERM");
  } catch {
    return;
  }
  const deadline = Date.now() + graceMs;
  while (alive(pid) && Date.now() < deadline) await Bun.sleep(50);
  if (alive(pid)) process.kill(pid, "SIGKILL");
  while (alive(pid)) await Bun.sleep(20);
}

/** Runs a command to completion; throws with its output on a non-zero exit. */
export function run(cmd: string[], env: Record<string, string> = {}, input?: string): string {
  const r = Bun.spawnSync(cmd, {
    env: { ...process.env, ...env },
    stdin: input ? Buffer.from(input) : "ignore",
  });
  if (r.exitCode !== 0) {
    throw new Error(`${cmd.join(" ")} exited ${r.exitCode}:\n${r.stdout.toString()}${r.stderr.toString()}`);
  }
  return r.stdout.toString();
}
