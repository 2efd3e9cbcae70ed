#!/usr/bin/env bun
import { buildInfo } from "../lib/build-info.ts";
import { parseGoFlags, renderFlagHelp } from "../proxy/flags.ts";
import { createLogger, type Level } from "../proxy/log.ts";
import { exitWith } from "./exit.ts";
import { FLAGS, SUMMARY } from "./svc-proxy/flags.ts";

async function main(argv: string[]): Promise<void> {
  const flags = parseGoFlags(
    FLAGS,
    argv.map((a) => (a === "-h" || a === "--help" ? "-help" : a)),
  );
  if (flags.help) {
    process.stdout.write(renderFlagHelp("svc-proxy", SUMMARY, FLAGS));
    return;
  }
  if (flags.version) {
    const i = buildInfo();
    process.stdout.write(
      `svc-proxy version ${i.version} (commit ${i.commit}, built ${i.date}, ${i.runtime}, ${i.platform})\n`,
    );
    return;
  }
  const devel = flags["zap-devel"] === true;
  const log = createLogger({
    level: devel ? "debug" : (flags["zap-log-level"] as Level),
    encoder: devel ? "console" : (flags["zap-encoder"] as "json" | "console"),
    stacktraceLevel: flags["zap-stacktrace-level"] as Level,
  });
  const { configSource, parseConfigText } = await import("../proxy/config/load.ts");
  const { validateConfig } = await import("../proxy/config/validate.ts");
  const source = configSource(typeof flags.config === "string" ? flags.config : undefined);
  const { config, warnings } = validateConfig(parseConfigText(source));
  for (const w of warnings) log.warn(w, { config: source.origin });
  if (flags.check) {
    const { stringify } = await import("yaml");
    process.stdout.write(
      `# ${source.origin}: valid (${config.listeners.length} listener${config.listeners.length === 1 ? "" : "s"}${config.admission ? ", admission webhook" : ""})\n`,
    );
    process.stdout.write(stringify(config.effective));
    return;
  }
  const { startProxy } = await import("../proxy/runtime.ts");
  const proxy = await startProxy(config, log);
  // Each connection, request and session contains its own faults. One of ours that escapes them anyway
  // is logged with its stack, and every listener keeps serving (docs/proxy-configuration.md, "Faults").
  const fault = (what: string) => (e: unknown) =>
    log.error(`internal fault: ${what}`, { error: e instanceof Error ? e : String(e) });
  process.on("uncaughtException", fault("uncaught exception"));
  process.on("unhandledRejection", fault("unhandled rejection"));
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) {
      log.warn("second signal: exiting now", { signal });
      process.exit(1);
    }
    stopping = true;
    log.info("shutting down", { signal, drain_seconds: DRAIN_MS / 1000 });
    await proxy.close(DRAIN_MS);
    process.exit(0);
  };
  process.on("SIGTERM", () => void stop("SIGTERM"));
  process.on("SIGINT", () => void stop("SIGINT"));
}

/** How long SIGTERM waits for in-flight requests before closing connections. */
const DRAIN_MS = 10_000;

main(process.argv.slice(2)).catch((e) => exitWith("svc-proxy", e));
