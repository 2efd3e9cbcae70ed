import { readdirSync, readFileSync, statSync } from "node:fs";
import { extname, join } from "node:path";
import { parseAllDocuments, stringify } from "yaml";
import { SvcError } from "../errors.ts";

/**
 * Reads what `kubectl apply -f` would read — files, directories (`-R` for subdirectories), http(s) URLs,
 * `-` for standard input — and splits multi-document YAML (or JSON) into objects. Errors name the
 * source and, for YAML, the line.
 */
export interface Source {
  name: string;
  text: string;
}

const MANIFEST = new Set([".yaml", ".yml", ".json"]);

export async function readSources(
  paths: string[],
  recursive: boolean,
  stdin: () => string,
): Promise<Source[]> {
  const out: Source[] = [];
  for (const p of paths) {
    if (p === "-") out.push({ name: "standard input", text: stdin() });
    else if (/^https?:\/\//.test(p)) {
      let res: Response;
      try {
        res = await fetch(p);
      } catch (e) {
        throw new SvcError("usage", `-f ${p}: cannot fetch it: ${(e as Error).message}`);
      }
      if (!res.ok) throw new SvcError("usage", `-f ${p}: the server answered ${res.status}`);
      out.push({ name: p, text: await res.text() });
    } else out.push(...readPath(p, recursive, true));
  }
  return out;
}

function readPath(p: string, recursive: boolean, top: boolean): Source[] {
  let st: ReturnType<typeof statSync>;
  try {
    st = statSync(p);
  } catch (e) {
    throw new SvcError(
      "usage",
      `-f ${p}: ${(e as NodeJS.ErrnoException).code === "ENOENT" ? "no such file or directory" : (e as Error).message}`,
    );
  }
  if (!st.isDirectory()) return [{ name: p, text: readFileSync(p, "utf8") }];
  if (!top && !recursive) return [];
  return readdirSync(p)
    .sort()
    .flatMap((entry) => {
      const full = join(p, entry);
      if (statSync(full).isDirectory()) return recursive ? readPath(full, recursive, false) : [];
      return MANIFEST.has(extname(entry)) ? [{ name: full, text: readFileSync(full, "utf8") }] : [];
    });
}

export function parseObjects(sources: Source[]): Record<string, unknown>[] {
  const objects: Record<string, unknown>[] = [];
  for (const s of sources) {
    for (const doc of parseAllDocuments(s.text)) {
      if ("errors" in doc && doc.errors.length > 0) {
        const e = doc.errors[0] as { message: string; linePos?: { line: number }[] };
        const line = e.linePos?.[0]?.line;
        throw new SvcError(
          "usage",
          `${s.name}${line ? `:${line}` : ""}: not valid YAML: ${e.message.split("\n")[0]}`,
        );
      }
      const value = doc.toJS();
      if (value === null || value === undefined) continue;
      if (typeof value !== "object" || Array.isArray(value))
        throw new SvcError("usage", `${s.name}: a manifest must be an object with apiVersion and kind`);
      objects.push(value as Record<string, unknown>);
    }
  }
  return objects;
}

export function toYaml(objects: Record<string, unknown>[]): string {
  return objects.map((o) => stringify(o)).join("---\n");
}
