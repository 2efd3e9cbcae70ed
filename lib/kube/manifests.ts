/**
 * Reads what `kubectl apply -f` would read — files, directories (`-R` for subdirectories), http(s) URLs,
 * `-` for standard input — and splits multi-document YAML (or JSON) into objects. Errors name the
 * source and, for YAML, the line.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { extname, join } from "node:path";
import { parseAllDocuments } from "yaml";
import { SvcError } from "../errors.ts";

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

/**
 * How kubectl reads YAML (sigs.k8s.io/yaml over go-yaml v2): YAML 1.1, so merge keys (`<<`), `yes`/`no`
 * booleans and the like mean what they mean to kubectl. Duplicate keys and alias bombs are errors.
 */
export const KUBECTL_YAML = { version: "1.1", merge: true, uniqueKeys: true, maxAliasCount: 100 } as const;

/**
 * A YAML merge key (`<<`) is refused: kubectl's YAML library lets a merge written after a key override
 * it, the YAML specification does not, so svc cannot tell which value kubectl will send.
 */
export function refuseMergeKeys(text: string, source: string): void {
  if (/(^|[\s{,[\-?])<<\s*:/m.test(text))
    throw new SvcError(
      "usage",
      `${source}: svc does not accept YAML merge keys (<<): kubectl and the YAML specification read them differently; write the keys out`,
    );
}

/**
 * The objects of the sources, one per document. Like kubectl, any object with an `items` list is a list,
 * whatever its kind: its items are the objects (recursively).
 */
export function parseObjects(sources: Source[]): Record<string, unknown>[] {
  const objects: Record<string, unknown>[] = [];
  for (const s of sources) {
    refuseMergeKeys(s.text, s.name);
    for (const doc of parseAllDocuments(s.text, KUBECTL_YAML)) {
      if ("errors" in doc && doc.errors.length > 0) {
        const e = doc.errors[0] as { message: string; linePos?: { line: number }[] };
        const line = e.linePos?.[0]?.line;
        throw new SvcError(
          "usage",
          `${s.name}${line ? `:${line}` : ""}: not valid YAML: ${e.message.split("\n")[0]}`,
        );
      }
      let value: unknown;
      try {
        value = doc.toJS({ maxAliasCount: KUBECTL_YAML.maxAliasCount });
      } catch (e) {
        throw new SvcError("usage", `${s.name}: ${(e as Error).message.split("\n")[0]}`);
      }
      if (value === null || value === undefined) continue;
      if (typeof value !== "object" || Array.isArray(value))
        throw new SvcError("usage", `${s.name}: a manifest must be an object with apiVersion and kind`);
      objects.push(...flattenLists(value as Record<string, unknown>));
    }
  }
  return objects;
}

function flattenLists(o: Record<string, unknown>): Record<string, unknown>[] {
  if (!Array.isArray(o.items)) return [o];
  return (o.items as unknown[]).flatMap((i) =>
    i !== null && typeof i === "object" && !Array.isArray(i)
      ? flattenLists(i as Record<string, unknown>)
      : [],
  );
}

/**
 * The objects as kubectl's input: JSON documents, so that kubectl reads exactly what svc checked (no
 * anchors, tags or merge keys left to interpret).
 */
export function toKubectlInput(objects: Record<string, unknown>[]): string {
  // Each document after `---`: a stream that starts with `{` would be read as one JSON document.
  return objects.map((o) => `---\n${JSON.stringify(o)}\n`).join("");
}
