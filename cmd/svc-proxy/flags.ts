/**
 * svc-proxy: SPIFFE mTLS proxy for HTTP, TCP and MQTT. Flags follow Go conventions
 * (docs/proxy-configuration.md, "Flags").
 */
import type { FlagSpec } from "../../proxy/flags.ts";
import { ENCODERS, LEVELS } from "../../proxy/log.ts";

export const FLAGS: FlagSpec[] = [
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
    values: [...LEVELS],
  },
  {
    name: "zap-encoder",
    kind: "string",
    usage: "Log encoding",
    default: "json",
    values: [...ENCODERS],
  },
  { name: "zap-devel", kind: "bool", usage: "Development logging: console encoder, debug level" },
  {
    name: "zap-stacktrace-level",
    kind: "string",
    usage: "Level at and above which stack traces are logged",
    default: "error",
    values: [...LEVELS],
  },
];

export const SUMMARY =
  "svc-proxy -config <path>   (or SVC_PROXY_CONFIG holding YAML or JSON text)\n  Carries HTTP, TCP and MQTT over SPIFFE mutual TLS, and serves the cluster's compartment admission\n  webhook (the admission: block). Configuration changes apply on restart.";
