import type { Subprocess } from "bun";

/**
 * A child process for tests: stdout is read as JSON or text lines; waits are bounded; stop() kills it by
 * PID. Every process started here is stopped by stopAll() in afterAll.
 */
export interface Proc {
  proc: Subprocess<"ignore", "pipe", "pipe">;
  lines: string[];
  stderr(): string;
  waitFor(pred: (line: string) => boolean, timeoutMs?: number): Promise<string>;
  exited: Promise<number>;
  stop(signal?: NodeJS.Signals): Promise<void>;
}

const running = new Set<Proc>();
export const BUN = process.execPath;
export const ROOT = new URL("../..", import.meta.url).pathname.replace(/\/$/, "");

/** Runs a command to its end without blocking (many may run at once): its exit code, stdout and stderr. */
export async function runToEnd(
  cmd: string[],
  options: { cwd?: string; env?: Record<string, string | undefined>; input?: string } = {},
): Promise<{ code: number; out: string; err: string }> {
  const p = Bun.spawn(cmd, {
    cwd: options.cwd,
    env: options.env,
    stdin: options.input === undefined ? "ignore" : Buffer.from(options.input),
    stdout: "pipe",
    stderr: "pipe",
  });
  const [out, err, code] = await Promise.all([
    new Response(p.stdout).text(),
    new Response(p.stderr).text(),
    p.exited,
  ]);
  return { code, out, err };
}

export function spawnProc(cmd: string[], env: Record<string, string> = {}): Proc {
  const proc = Bun.spawn(cmd, {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  const lines: string[] = [];
  const waiters = new Set<() => void>();
  let err = "";
  (async () => {
    const decoder = new TextDecoder();
    let buf = "";
    for await (const chunk of proc.stdout) {
      buf += decoder.decode(chunk, { stream: true });
      let nl = buf.indexOf("\n");
      while (nl >= 0) {
        lines.push(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
        nl = buf.indexOf("\n");
      }
      for (const w of waiters) w();
    }
    for (const w of waiters) w();
  })();
  (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of proc.stderr) err += decoder.decode(chunk, { stream: true });
  })();
  const p: Proc = {
    proc,
    lines,
    stderr: () => err,
    exited: proc.exited,
    waitFor(pred, timeoutMs = 15_000) {
      return new Promise((resolve, reject) => {
        let seen = 0;
        const check = () => {
          for (; seen < lines.length; seen++) {
            const line = lines[seen] as string;
            if (pred(line)) {
              cleanup();
              return resolve(line);
            }
          }
          if (proc.exitCode !== null) {
            cleanup();
            reject(
              new Error(
                `${cmd.join(" ")} exited ${proc.exitCode} before the awaited line\nstdout:\n${lines.join("\n")}\nstderr:\n${err}`,
              ),
            );
          }
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(
            new Error(
              `timed out after ${timeoutMs} ms waiting for output of ${cmd.join(" ")}\nstdout:\n${lines.join("\n")}\nstderr:\n${err}`,
            ),
          );
        }, timeoutMs);
        const cleanup = () => {
          clearTimeout(timer);
          waiters.delete(check);
        };
        waiters.add(check);
        proc.exited.then(() => setTimeout(check, 20));
        check();
      });
    },
    async stop(signal = "SIGTERM") {
      running.delete(p);
      if (proc.exitCode === null) {
        proc.kill(signal);
        const timer = setTimeout(() => proc.kill("SIGKILL"), 5000);
        await proc.exited;
        clearTimeout(timer);
      }
    },
  };
  running.add(p);
  return p;
}

export async function stopAll(): Promise<void> {
  await Promise.all([...running].map((p) => p.stop()));
}

/** The parsed JSON lines a process printed that have `key`. */
export function jsonLines<T = Record<string, unknown>>(p: Proc, key: string): T[] {
  return p.lines.flatMap((l) => {
    try {
      const v = JSON.parse(l);
      return key in v ? [v as T] : [];
    } catch {
      return [];
    }
  });
}
