/**
 * The compartment marks of an object: its `svc.io/compartment` label and `mls.svc.dev/*` annotations,
 * on the object and on each pod template it holds (by place: "" for the object, "spec.template" …).
 * Writes that would change them are what svc's write guards look for.
 */
import { parse } from "yaml";
import { SvcError } from "../errors.ts";
import { isObj } from "./fields.ts";
import { KUBECTL_YAML, refuseMergeKeys } from "./manifests.ts";
import { COMPARTMENT_LABEL, isMarkAnnotation, isMarkLabel } from "./mls.ts";

/**
 * Where templates of other objects live, for every kind that has one (svc looks in all places, whatever
 * the kind): pod templates, a cron job's job template (its jobs get those labels), and a stateful set's
 * volume claim templates.
 */
const TEMPLATE_PLACES = [
  ["spec", "template"],
  ["spec", "jobTemplate"],
  ["spec", "jobTemplate", "spec", "template"],
];
const TEMPLATE_LISTS = [["spec", "volumeClaimTemplates"]];

/** An object's marks by place: "place|label|key" or "place|annotation|key" → value. */
export type PlacedMarks = Map<string, string>;

export function marksOf(o: unknown): PlacedMarks {
  const marks: PlacedMarks = new Map();
  const read = (holder: unknown, place: string) => {
    const meta = isObj(holder) && isObj(holder.metadata) ? holder.metadata : {};
    const labels = isObj(meta.labels) ? meta.labels : {};
    const annotations = isObj(meta.annotations) ? meta.annotations : {};
    for (const [k, v] of Object.entries(labels))
      if (isMarkLabel(k)) marks.set(`${place}|label|${k}`, String(v));
    for (const [k, v] of Object.entries(annotations))
      if (isMarkAnnotation(k)) marks.set(`${place}|annotation|${k}`, String(v));
  };
  read(o, "");
  const at = (path: string[]) =>
    path.reduce<unknown>((node, key) => (isObj(node) ? node[key] : undefined), o);
  for (const path of TEMPLATE_PLACES) {
    const node = at(path);
    if (isObj(node)) read(node, path.join("."));
  }
  for (const path of TEMPLATE_LISTS) {
    const list = at(path);
    if (Array.isArray(list))
      list.forEach((item, i) => {
        read(item, `${path.join(".")}[${i}]`);
      });
  }
  return marks;
}

/** The marks that differ between two states ("added", "removed" and "changed" alike), described. */
export function changedMarks(before: PlacedMarks, after: PlacedMarks): string[] {
  const out: string[] = [];
  for (const key of new Set([...before.keys(), ...after.keys()])) {
    const [a, b] = [before.get(key), after.get(key)];
    if (a === b) continue;
    const [place, kind, name] = key.split("|");
    const where = place ? ` of the pod template (${place})` : "";
    out.push(`${kind} ${name}${where}: ${a ?? "(none)"} → ${b ?? "(none)"}`);
  }
  return out;
}

/** The compartment label values an object and its templates carry that are not `current`. */
export function foreignCompartments(o: unknown, current: string): string[] {
  const out: string[] = [];
  for (const [key, value] of marksOf(o))
    if (key.endsWith(`|label|${COMPARTMENT_LABEL}`) && value.toUpperCase() !== current) out.push(value);
  return out;
}

/** `kubectl label`'s or `annotate`'s KEY=VALUE and KEY- arguments that set or remove a mark. */
export function markArguments(positionals: string[], annotate: boolean): string[] {
  const isMark = annotate ? isMarkAnnotation : isMarkLabel;
  return positionals.filter((p) => {
    const eq = p.indexOf("=");
    if (eq > 0) return isMark(p.slice(0, eq));
    return p.endsWith("-") && isMark(p.slice(0, -1));
  });
}

/** A patch as kubectl reads it (JSON or YAML 1.1). */
export function parsePatch(text: string): unknown {
  refuseMergeKeys(text, "--patch");
  try {
    return parse(text, KUBECTL_YAML);
  } catch (e) {
    throw new SvcError("usage", `--patch: not valid JSON or YAML (${(e as Error).message.split("\n")[0]})`);
  }
}

/**
 * Whether a `kubectl patch` may change a mark. JSON patch: an operation whose path reaches a mark, or
 * replaces a labels, annotations, metadata or template object wholesale, or whose value carries a mark.
 * Merge and strategic merge patch: a labels or annotations map that names a mark, or is set to null, or a
 * metadata set to null; a `$` directive anywhere is refused (svc cannot tell what it will do).
 * Returns what it found, or [] when the patch leaves the marks alone.
 */
export function marksInPatch(type: string, patch: unknown): string[] {
  if (type === "json") {
    if (!Array.isArray(patch))
      throw new SvcError("usage", "--patch: a JSON patch must be a list of operations");
    return patch.flatMap((op, i) => jsonOpTouches(op, i));
  }
  if (type !== "merge" && type !== "strategic")
    throw new SvcError("usage", `--type ${JSON.stringify(type)}: expected json, merge or strategic`);
  return mergeTouches(patch, "");
}

const WHOLESALE = new Set(["labels", "annotations", "metadata", "template", "jobTemplate", "spec"]);

function jsonOpTouches(op: unknown, i: number): string[] {
  if (!isObj(op)) return [`operation ${i}: not an object`];
  if (op.op === "test") return [];
  const found: string[] = [];
  for (const field of ["path", "from"] as const) {
    if (typeof op[field] !== "string") continue;
    const segments = (op[field] as string)
      .split("/")
      .slice(1)
      .map((s) => s.replaceAll("~1", "/").replaceAll("~0", "~"));
    const last = segments.at(-1);
    const reaches = segments.some(
      (s, k) =>
        (segments[k - 1] === "labels" && isMarkLabel(s)) ||
        (segments[k - 1] === "annotations" && isMarkAnnotation(s)),
    );
    if (reaches || segments.length === 0 || (last !== undefined && WHOLESALE.has(last)))
      found.push(`operation ${i} (${String(op.op)} ${String(op[field])})`);
  }
  if ("value" in op) found.push(...mergeTouches(op.value, `operation ${i} value `));
  return found;
}

function mergeTouches(node: unknown, at: string): string[] {
  if (Array.isArray(node)) return node.flatMap((n, i) => mergeTouches(n, `${at}[${i}]`));
  if (!isObj(node)) return [];
  const found: string[] = [];
  for (const [key, value] of Object.entries(node)) {
    const here = at ? `${at}.${key}` : key;
    if (key.startsWith("$")) found.push(`${here} (a patch directive)`);
    else if (key === "metadata" && value === null) found.push(here);
    else if (key === "labels" || key === "annotations") {
      const isMark = key === "labels" ? isMarkLabel : isMarkAnnotation;
      if (!isObj(value)) found.push(here);
      else for (const k of Object.keys(value)) if (isMark(k) || k.startsWith("$")) found.push(`${here}.${k}`);
    } else found.push(...mergeTouches(value, here));
  }
  return found;
}
