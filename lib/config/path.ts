import { homedir } from "node:os";
import { join } from "node:path";

/** ~/.svc/config.yaml, or the file SVC_CONFIG names. */
export function defaultConfigPath(): string {
  return join(homedir(), ".svc", "config.yaml");
}

export function configPath(env = process.env): string {
  return env.SVC_CONFIG || defaultConfigPath();
}
