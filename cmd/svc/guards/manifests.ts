import { readFileSync } from "node:fs";
import { SvcError } from "../../../lib/errors.ts";
import { flagSet, flagValues, withoutFlags } from "../../../lib/kube/grammar.ts";
import { COMPARTMENT_LABEL, describeObject, injectMls } from "../../../lib/kube/inject.ts";
import { parseObjects, readSources, toYaml } from "../../../lib/kube/manifests.ts";
import { changedMarks, foreignCompartments, marksOf } from "../../../lib/kube/marks.ts";
import { type Guarded, type GuardInput, refuseUnlessOverridden } from "./guard.ts";

/**
 * apply, create and replace from manifests (-f files, directories, -R, URLs, `-` for standard input; -k
 * through `kubectl kustomize`). svc reads the manifests itself and hands kubectl exactly what it checked
 * (`-f -`), so a file or URL that changes in between cannot slip past.
 * - apply (4.5, 2.2) injects the compartment labels and annotations into every object and pod template;
 *   an object labelled for another compartment is refused, and so is one that exists in the cluster in
 *   another compartment (or in none): applying would move it into the current one.
 * - create refuses objects labelled for another compartment.
 * - replace refuses those too, and any object whose marks differ from the live object's.
 * `--force` with the cluster's override permission lets such a write through (for apply and replace,
 * `--force` also keeps kubectl's meaning).
 */
const SOURCE_FLAGS = new Set(["filename", "kustomize", "recursive"]);

async function readManifests(g: GuardInput): Promise<Record<string, unknown>[]> {
  const files = flagValues(g.line, "filename");
  const kustomize = flagValues(g.line, "kustomize");
  const command = g.line.path.join(" ");
  if (files.length === 0 && kustomize.length === 0)
    throw new SvcError("usage", `svc ${command} needs -f <file|url|dir|-> or -k <dir>`);
  const sources = await readSources(files, flagSet(g.line, "recursive"), () => readFileSync(0, "utf8"));
  for (const dir of kustomize) {
    const r = g.lookup.run(["kustomize", dir], null);
    if (r.code !== 0) throw new SvcError("usage", `-k ${dir}: ${r.err.trim()}`);
    sources.push({ name: `kustomization ${dir}`, text: r.out });
  }
  const objects = parseObjects(sources).flatMap((o) =>
    typeof o.kind === "string" && o.kind.endsWith("List") && Array.isArray(o.items)
      ? (o.items as Record<string, unknown>[])
      : [o],
  );
  if (objects.length === 0)
    throw new SvcError("usage", `no objects in ${[...files, ...kustomize].join(", ")}`);
  return objects;
}

export async function guardManifests(g: GuardInput): Promise<Guarded> {
  const command = g.line.path.join(" ");
  if (command === "create" && flagSet(g.line, "edit"))
    refuseUnlessOverridden(
      g,
      "svc cannot see what create --edit changes in the editor; create from the file, then use svc edit",
      "create --edit",
    );
  const objects = await readManifests(g);
  const problems: string[] = [];
  for (const o of objects) {
    if (command === "apply") injectMls(o, g.active);
    else
      for (const c of foreignCompartments(o, g.active.label))
        problems.push(`${describeObject(o)} is labelled ${COMPARTMENT_LABEL}=${c}`);
  }
  const stdin = toYaml(objects);
  if (command !== "create") problems.push(...liveProblems(g, objects, stdin, command));
  const targets = objects.map(describeObject);
  const args = [...withoutFlags(g.line, SOURCE_FLAGS), "-f", "-"];
  if (problems.length === 0) return { args, stdin, targets };
  refuseUnlessOverridden(
    g,
    `Cannot ${command} across compartments: ${problems.join("; ")}`,
    `${command} across compartments (${problems.join("; ")})`,
  );
  return { args, stdin, targets, forced: true };
}

/** The objects as they are in the cluster, compared with what the write would make of them. */
function liveProblems(
  g: GuardInput,
  objects: Record<string, unknown>[],
  yaml: string,
  command: string,
): string[] {
  const live = g.lookup.objects(["--filename", "-", "--ignore-not-found"], undefined, yaml);
  const key = (o: { kind?: unknown; metadata?: unknown }) => {
    const m = (o.metadata ?? {}) as { name?: string };
    return `${String(o.kind)}/${m.name}`;
  };
  const wanted = new Map(objects.map((o) => [key(o), o]));
  const problems: string[] = [];
  for (const l of live) {
    const what = describeObject(l as Record<string, unknown>);
    if (command === "apply") {
      const now = l.metadata?.labels?.[COMPARTMENT_LABEL] ?? "";
      if (now.toUpperCase() !== g.active.label)
        problems.push(`${what} exists in ${now ? `compartment ${now}` : "no compartment"}`);
      continue;
    }
    const changes = changedMarks(marksOf(l), marksOf(wanted.get(key(l))));
    if (changes.length > 0) problems.push(`${what} would change: ${changes.join(", ")}`);
  }
  return problems;
}
