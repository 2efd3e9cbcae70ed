#!/usr/bin/env bun
import { buildInfo } from "../lib/build-info.ts";
import { type FlagSpec, parseGoFlags, renderFlagHelp } from "../proxy/flags.ts";
import { createLogger, type Level } from "../proxy/log.ts";
import { exitWith } from "./exit.ts";

/** svc-proxy: SPIFFE mTLS proxy for HTTP, TCP and MQTT. Flags follow Go conventions (spec 4.1). */
const FLAGS: FlagSpec[] = [
  {
    name: "config",
    kind: "string",
    usage: "Path to the YAML configuration file; overrides SVC_PROXY_CONFIG",
  },
  {
    name: "check",
    kind: "bool",
    usage: "Validate the configuration, print it with every default filled in, and exit",
  },
  { name: "version", kind: "bool", usage: "Print the version and exit" },
  { name: "help", kind: "bool", usage: "Show this help" },
  {
    name: "zap-log-level",
    kind: "string",
    usage: "Log level",
    default: "info",
    values: ["debug", "info", "warn", "error"],
  },
  {
    name: "zap-encoder",
    kind: "string",
    usage: "Log encoding",
    default: "json",
    values: ["json", "console"],
  },
  { name: "zap-devel", kind: "bool", usage: "Development logging: console encoder, debug level" },
  {
    name: "zap-stacktrace-level",
    kind: "string",
    usage: "Level at and above which stack traces are logged",
    default: "error",
    values: ["debug", "info", "warn", "error"],
  },
];

const SUMMARY =
  "svc-proxy -config <path>   (or SVC_PROXY_CONFIG holding YAML or JSON text)\n  Carries HTTP, TCP and MQTT over SPIFFE mutual TLS, and serves the cluster's compartment admission\n  webhook (the admission: block). Configuration changes apply on restart.";

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
