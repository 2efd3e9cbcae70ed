#!/usr/bin/env bun
import { buildInfo } from "../lib/build-info.ts";
import { SvcError } from "../lib/errors.ts";
import { type FlagSpec, parseGoFlags, renderFlagHelp } from "../proxy/flags.ts";
import { exitWith } from "./exit.ts";

/** svc-proxy: SPIFFE mTLS proxy for HTTP, TCP and MQTT. Flags follow Go conventions (spec 4.1). */
const FLAGS: FlagSpec[] = [
  {
    name: "config",
    kind: "string",
    usage: "Path to the YAML configuration file; overrides SVC_PROXY_CONFIG",
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
  "svc-proxy -config <path>   (or SVC_PROXY_CONFIG holding YAML or JSON text)\n  Carries HTTP, TCP and MQTT over SPIFFE mutual TLS. Configuration changes apply on restart.";

function main(argv: string[]): void {
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
  const path = typeof flags.config === "string" ? flags.config : "";
  if (!path && !process.env.SVC_PROXY_CONFIG) {
    throw new SvcError(
      "usage",
      "no configuration: pass -config <path> or set SVC_PROXY_CONFIG to YAML or JSON text (see -help)",
    );
  }
  throw new SvcError("usage", "listeners are not implemented in this build yet");
}

try {
  main(process.argv.slice(2));
} catch (e) {
  exitWith("svc-proxy", e);
}
