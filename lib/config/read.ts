/**
 * The configuration for commands that only read it (every kubectl command goes through here): parsed with
 * Bun's native YAML parser, a fraction of the cost of a first run of the document parser that keeps
 * comments and lines. Whatever the fast path does not accept cleanly — a YAML error, several documents, a
 * merge key, an unknown key, a validation issue — is read again by loadConfig, whose messages and
 * warnings name the line. The result is the same configuration either way.
 */
import { readFileSync } from "node:fs";
import * as v from "valibot";
import type { LoadedConfig } from "./file.ts";
import { configPath } from "./path.ts";
import { KNOWN_KEYS, SvcConfig } from "./schema.ts";

export type ReadConfig = Pick<LoadedConfig, "path" | "config" | "exists">;

const isPlain = (x: unknown): x is Record<string, unknown> =>
  x !== null && typeof x === "object" && !Array.isArray(x);

function onlyKnown(o: unknown, known: string[]): boolean {
  return !isPlain(o) || Object.keys(o).every((k) => known.includes(k));
}

export async function readConfig(warn: (message: string) => void, path = configPath()): Promise<ReadConfig> {
  const slow = async () => (await import("./file.ts")).loadConfig(path, { warn });
  let data: unknown;
  try {
    const text = readFileSync(path, "utf8");
    if (text.includes("<<")) return slow();
    data = Bun.YAML.parse(text) ?? {};
  } catch {
    return slow();
  }
  if (!isPlain(data) || !onlyKnown(data, KNOWN_KEYS.top) || !onlyKnown(data.auditLog, KNOWN_KEYS.auditLog))
    return slow();
  const contexts = data.contexts;
  if (isPlain(contexts) && !Object.values(contexts).every((c) => onlyKnown(c, KNOWN_KEYS.context)))
    return slow();
  const result = v.safeParse(SvcConfig, data);
  return result.success ? { path, config: result.output, exists: true } : slow();
}
