/**
 * Runs svc-proxy in-process for a fixed time and then returns normally, so that Bun writes a CPU profile
 * (`--cpu-prof` writes on a normal exit; the svc-proxy binary exits through process.exit on a signal).
 *
 *   SVC_PROXY_CONFIG='…' bun --cpu-prof-md --cpu-prof-dir=/tmp/prof bench/profile-proxy.ts [milliseconds]
 *
 * Drive load at it meanwhile (wrk through a client proxy, as bench/http.ts does).
 */
import { validateConfig } from "../proxy/config/validate.ts";
import { createLogger } from "../proxy/log.ts";
import { startProxy } from "../proxy/runtime.ts";

const text = process.env.SVC_PROXY_CONFIG;
if (!text) throw new Error("set SVC_PROXY_CONFIG to the configuration (JSON) of the proxy to profile");
const { config } = validateConfig(JSON.parse(text));
const proxy = await startProxy(config, createLogger({ level: "error", encoder: "json" }));
await Bun.sleep(Number(process.argv[2] ?? 10_000));
await proxy.close(0);
