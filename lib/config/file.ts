import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import * as v from "valibot";
import { type Document, isMap, LineCounter, parseDocument } from "yaml";
import { SvcError } from "../errors.ts";
import { SvcConfig } from "./schema.ts";

/**
 * Reading and writing ~/.svc/config.yaml. Errors name the file, the line and the field. Writes edit the
 * parsed YAML document (so comments and order survive) and replace the file atomically (write a temporary
 * file beside it, then rename), so a crash never leaves half a configuration.
 */
export function configPath(env = process.env): string {
  return env.SVC_CONFIG || join(homedir(), ".svc", "config.yaml");
}

export interface LoadedConfig {
  path: string;
  config: SvcConfig;
  /** The YAML document, for edits that keep comments. */
  doc: Document;
  exists: boolean;
}

export function loadConfig(path = configPath()): LoadedConfig {
  let text = "";
  let exists = true;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code !== "ENOENT") throw new SvcError("usage", `cannot read ${path}: ${code}`);
    exists = false;
  }
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false });
  if (doc.errors.length > 0) {
    const e = doc.errors[0] as { message: string; pos: [number, number] };
    const at = lines.linePos(e.pos[0]);
    throw new SvcError("usage", `${path}:${at.line}: not valid YAML: ${e.message.split("\n")[0]}`);
  }
  const data = doc.toJS() ?? {};
  const result = v.safeParse(SvcConfig, data);
  if (!result.success) {
    const problems = result.issues.map((i) => {
      const keys = (i.path ?? []).map((p) => p.key as string | number);
      // A missing field has no node: point at the nearest enclosing one.
      let range: [number, number] | undefined;
      for (let n = keys.length; n > 0 && !range; n--)
        range = (doc.getIn(keys.slice(0, n), true) as { range?: [number, number] } | undefined)?.range;
      const line = range ? `:${lines.linePos(range[0]).line}` : "";
      const message = i.input === undefined ? "is required" : i.message;
      return `${path}${line}: ${keys.join(".") || "(top level)"}: ${message}`;
    });
    throw new SvcError("usage", problems.join("\n"));
  }
  if (!isMap(doc.contents) && exists && text.trim() !== "")
    throw new SvcError("usage", `${path}: the top level must be a map of settings`);
  return { path, config: result.output, doc, exists };
}

/** Writes the document back atomically. */
export function saveConfig(loaded: LoadedConfig): void {
  mkdirSync(dirname(loaded.path), { recursive: true, mode: 0o700 });
  const tmp = `${loaded.path}.${process.pid}.tmp`;
  writeFileSync(tmp, loaded.doc.toString(), { mode: 0o600 });
  renameSync(tmp, loaded.path);
}
