/**
 * apply, create and replace from manifests (-f files, directories, -R, URLs, `-` for standard input; -k
 * through `kubectl kustomize`). svc reads the manifests itself and hands kubectl exactly what it checked
 * (`-f -`), so a file or URL that changes in between cannot slip past.
 * - apply (docs/svc-config.md, "svc apply") injects the compartment labels and annotations into every object
 *   and pod template; an object labelled for another compartment is refused, and so is one that exists in the
 *   cluster in another compartment (or in none): applying would move it into the current one.
 * - create refuses objects labelled for another compartment.
 * - replace refuses those too, and any object whose marks differ from the live object's.
 * `--force` with the cluster's override permission lets such a write through (for apply and replace,
 * `--force` also keeps kubectl's meaning).
 */
import { readFileSync } from "node:fs";
import { SvcError } from "../../../lib/errors.ts";
import { filenames, flagSet, flagValue, flagValues } from "../../../lib/kube/grammar.ts";
import { describeObject, injectMls } from "../../../lib/kube/inject.ts";
import { parseObjects, readSources, toKubectlInput } from "../../../lib/kube/manifests.ts";
import { changedMarks, foreignCompartments, marksOf } from "../../../lib/kube/marks.ts";
import { COMPARTMENT_LABEL, inCompartment } from "../../../lib/kube/mls.ts";
import { type Guarded, type GuardInput, refuseUnlessOverridden, restWithout } from "./guard.ts";

const SOURCE_FLAGS = ["filename", "kustomize", "recursive"];

async function readManifests(g: GuardInput): Promise<Record<string, unknown>[]> {
  const files = filenames(g.line);
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
  const objects = parseObjects(sources);
  if (objects.length === 0)
    throw new SvcError("usage", `no objects in ${[...files, ...kustomize].join(", ")}`);
  return objects;
}

export async function guardManifests(g: GuardInput): Promise<Guarded> {
  const command = g.line.path.join(" ");
  if (flagValue(g.line, "raw"))
    throw new SvcError(
      "compartment",
      inCompartment(
        `svc ${command} --raw sends the file to a URL of your choice, which svc cannot check; use ${command} -f without --raw`,
        g.active.label,
      ),
    );
  if (command === "create" && flagSet(g.line, "edit"))
    refuseUnlessOverridden(
      g,
      "svc cannot see what create --edit changes in the editor; create from the file, then use svc edit",
      "create --edit",
    );
  const objects = await readManifests(g);
  g.targets.push(...objects.map(describeObject));
  const { problems, foreign } = labelledElsewhere(g, objects);
  // apply injects the current compartment's marks; an object written for another one (let through only
  // by the override) is applied as written.
  if (command === "apply") for (const o of objects) if (!foreign.has(o)) injectMls(o, g.active);
  const stdin = toKubectlInput(objects);
  if (command !== "create") problems.push(...liveProblems(g, objects, stdin, command));
  const args = [...restWithout(g, ...SOURCE_FLAGS), "-f", "-"];
  if (problems.length === 0) return { args, stdin };
  refuseUnlessOverridden(
    g,
    `Cannot ${command} across compartments: ${problems.join("; ")}`,
    `${command} across compartments (${problems.join("; ")})`,
  );
  return { args, stdin, forced: true };
}

/**
 * The objects (or pod templates) labelled for a compartment other than the current one, and what a
 * refusal says of each. The commands that make objects from manifests or from their arguments
 * (generated.ts) refuse them alike.
 */
export function labelledElsewhere(
  g: GuardInput,
  objects: Record<string, unknown>[],
): { problems: string[]; foreign: Set<Record<string, unknown>> } {
  const problems: string[] = [];
  const foreign = new Set<Record<string, unknown>>();
  for (const o of objects)
    for (const c of foreignCompartments(o, g.active.label)) {
      problems.push(`${describeObject(o)} is labelled ${COMPARTMENT_LABEL}=${c}`);
      foreign.add(o);
    }
  return { problems, foreign };
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
