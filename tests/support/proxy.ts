import { BUN, type Proc, spawnProc } from "./proc.ts";

/**
 * svc-proxy from source as its own process, configured through SVC_PROXY_CONFIG; waits until it listens.
 * `runtimeArgs` go to bun, before the program (such as `--preload`).
 */
export async function startSvcProxy(
  config: object,
  extraArgs: string[] = [],
  env: Record<string, string> = {},
  runtimeArgs: string[] = [],
): Promise<Proc> {
  const proc = spawnProc([BUN, ...runtimeArgs, "cmd/svc-proxy.ts", ...extraArgs], {
    SVC_PROXY_CONFIG: JSON.stringify(config),
    ...env,
  });
  const listeners = (config as { listeners: unknown[] }).listeners.length;
  await new Promise<void>((resolve, reject) => {
    const started = Date.now();
    const tick = () => {
      const seen = proc
        .stderr()
        .split("\n")
        .filter((l) => l.includes('"msg":"listening"')).length;
      if (seen >= listeners) return resolve();
      if (proc.proc.exitCode !== null)
        return reject(new Error(`svc-proxy exited ${proc.proc.exitCode}:\n${proc.stderr()}`));
      if (Date.now() - started > 30_000)
        return reject(new Error(`svc-proxy did not listen within 30 s:\n${proc.stderr()}`));
      setTimeout(tick, 50);
    };
    tick();
  });
  return proc;
}

/** The JSON log lines svc-proxy wrote to standard error. */
export function logLines(proc: Proc): Record<string, unknown>[] {
  return proc
    .stderr()
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l));
}

/** The first JSON log line with `msg` (and the values of `fields`), waiting for it up to `timeoutMs`. */
export async function waitForLog(
  proc: Proc,
  msg: string,
  timeoutMs = 10_000,
  fields: Record<string, unknown> = {},
): Promise<Record<string, unknown>> {
  const deadline = Date.now() + timeoutMs;
  const wanted = Object.entries(fields);
  for (;;) {
    const line = logLines(proc).find((l) => l.msg === msg && wanted.every(([k, v]) => l[k] === v));
    if (line) return line;
    if (Date.now() > deadline)
      throw new Error(
        `no "${msg}" ${JSON.stringify(fields)} in the log within ${timeoutMs} ms:\n${proc.stderr()}`,
      );
    await Bun.sleep(25);
  }
}
