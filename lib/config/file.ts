/**
 * Reading and writing ~/.svc/config.yaml. Errors name the file, the line and the field. Writes edit the
 * parsed YAML document (so comments and order survive) and replace the file atomically (write a temporary
 * file beside it, then rename), so a crash never leaves half a configuration.
 */
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import * as v from "valibot";
import { type Document, isMap, isScalar, LineCounter, parseDocument } from "yaml";
import { SvcError } from "../errors.ts";
import { configPath, defaultConfigPath } from "./path.ts";
import { KNOWN_KEYS, SvcConfig } from "./schema.ts";

export interface LoadedConfig {
  path: string;
  config: SvcConfig;
  /** The YAML document, for edits that keep comments. */
  doc: Document;
  exists: boolean;
}

export interface LoadOptions {
  /** Only for `svc context create`, which makes the file: a missing file is then an empty configuration. */
  mayCreate?: boolean;
  /** Where warnings (unknown keys) go: svc says them to the person (cmd/say.ts). */
  warn: (message: string) => void;
}

/**
 * A missing default file is an empty configuration: svc is then plain kubectl. Any other path was named
 * (SVC_CONFIG) and must exist, or a mistyped name would turn the compartment guard off without a word.
 */
export function loadConfig(path = configPath(), options: LoadOptions): LoadedConfig {
  const { warn } = options;
  let text = "";
  let exists = true;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code !== "ENOENT") throw new SvcError("usage", `cannot read ${path}: ${code}`);
    if (!options.mayCreate && path !== defaultConfigPath())
      throw new SvcError(
        "usage",
        `SVC_CONFIG=${path}: no such file; create it with svc context create, or unset SVC_CONFIG`,
      );
    exists = false;
  }
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false });
  if (doc.errors.length > 0) {
    const e = doc.errors[0] as { message: string; pos: [number, number] };
    const at = lines.linePos(e.pos[0]);
    throw new SvcError("usage", `${path}:${at.line}: not valid YAML: ${e.message.split("\n")[0]}`);
  }
  for (const w of unknownKeys(doc, lines, path)) warn(w);
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

/**
 * One warning per key the schema does not know, at the top level, in each context and in auditLog, in the
 * order of the file: a misspelt key (`namspace`) would otherwise be ignored without a word.
 */
function unknownKeys(doc: Document, lines: LineCounter, path: string): string[] {
  const found: { at: number; message: string }[] = [];
  const check = (node: unknown, known: string[], where: string) => {
    if (!isMap(node)) return;
    for (const { key } of node.items) {
      const name = keyName(key);
      if (known.includes(name)) continue;
      const at = (key as { range?: [number, number] } | null)?.range?.[0];
      const line = at === undefined ? "" : `:${lines.linePos(at).line}`;
      const message = `${path}${line}: unknown key ${JSON.stringify(name)} ${where} (known: ${known.join(", ")})`;
      found.push({ at: at ?? 0, message });
    }
  };
  check(doc.contents, KNOWN_KEYS.top, "at the top level");
  const contexts = doc.get("contexts", true);
  if (isMap(contexts))
    for (const { key, value } of contexts.items)
      check(value, KNOWN_KEYS.context, `in contexts.${keyName(key)}`);
  check(doc.get("auditLog", true), KNOWN_KEYS.auditLog, "in auditLog");
  return found.sort((a, b) => a.at - b.at).map((f) => f.message);
}

function keyName(key: unknown): string {
  return String(isScalar(key) ? key.value : key);
}

/** Writes the document back atomically. */
export function saveConfig(loaded: LoadedConfig): void {
  mkdirSync(dirname(loaded.path), { recursive: true, mode: 0o700 });
  const tmp = `${loaded.path}.${process.pid}.tmp`;
  writeFileSync(tmp, loaded.doc.toString(), { mode: 0o600 });
  renameSync(tmp, loaded.path);
}
