import { readFileSync } from "node:fs";
import { SvcError } from "../../../lib/errors.ts";
import { type CommandLine, filenames, flagSet, flagValue, flagValues } from "../../../lib/kube/grammar.ts";
import { COMPARTMENT_LABEL, describeObject } from "../../../lib/kube/inject.ts";
import { toKubectlInput } from "../../../lib/kube/manifests.ts";
import {
  foreignCompartments,
  isMarkAnnotation,
  isMarkLabel,
  markArguments,
  marksInPatch,
  parsePatch,
} from "../../../lib/kube/marks.ts";
import { type Guarded, type GuardInput, refuseUnlessOverridden, restWithout } from "./guard.ts";
import { readManifests } from "./manifests.ts";

/**
 * label, annotate, patch, run, expose and `create job --from`: writes that would give an object
 * compartment marks (the `svc.io/compartment` label, the `mls.svc.dev/*` annotations) other than it has
 * are refused — moving an object between compartments, or out of all of them, takes `--force` and the
 * cluster's override permission.
 * - label, annotate, patch: any mark named, whatever its value (putting an object into a compartment is
 *   svc apply's job). A patch, and run's and expose's `--overrides`, are parsed as kubectl parses them and
 *   handed to kubectl as the JSON svc checked (a patch file is read once).
 * - run, expose: `--labels` of another compartment, `--annotations` naming a mark; expose without
 *   `--labels` copies the labels of what it exposes, and create job --from the cron job's template, so
 *   those are looked up and must be of the current compartment.
 * `--local` and `--dry-run=client` never reach the cluster and pass.
 */
/** `--dry-run` alone or `=true` is kubectl's old spelling of client. */
const offline = (line: CommandLine) =>
  flagSet(line, "local") || ["client", "", "true"].includes(flagValue(line, "dry-run") ?? "none");

export async function guardMarkWrites(g: GuardInput): Promise<Guarded> {
  const { line } = g;
  const command = line.path.join(" ");
  g.targets.push(...line.positionals.filter((p) => !p.includes("=") && !p.endsWith("-")));
  if (offline(line)) return {};
  // What svc read is what kubectl gets: flags svc took in are dropped, their checked form added.
  const drop: string[] = [];
  const extra: string[] = [];
  let stdin: string | undefined;
  const found: string[] = [];
  if (command === "patch") {
    const patch = parsePatch(patchText(line));
    found.push(...marksInPatch((flagValue(line, "type") || "strategic").toLowerCase(), patch));
    drop.push("patch", "patch-file");
    extra.push(`--patch=${JSON.stringify(patch)}`);
  } else if (command === "label" || command === "annotate")
    found.push(...markArguments(line.positionals, command === "annotate"));
  else {
    found.push(...createdMarks(line, g.active.label));
    const overrides = flagValue(line, "overrides");
    if (overrides) {
      const patch = parsePatch(overrides);
      const type = (flagValue(line, "override-type") || "merge").toLowerCase();
      found.push(...marksInPatch(type, patch).map((f) => `--overrides ${f}`));
      drop.push("overrides");
      extra.push(`--overrides=${JSON.stringify(patch)}`);
    }
    const copied = await copiedFrom(g, command);
    found.push(...copied.found);
    if (copied.stdin !== undefined) {
      stdin = copied.stdin;
      drop.push("filename", "kustomize", "recursive");
      extra.push("-f", "-");
    }
  }
  const rewritten: Guarded =
    drop.length > 0
      ? { args: [...restWithout(g, ...drop), ...extra], ...(stdin !== undefined ? { stdin } : {}) }
      : {};
  if (found.length === 0) return rewritten;
  refuseUnlessOverridden(
    g,
    `Cannot change the compartment of an object with svc ${command} (${found.join("; ")})`,
    `${command} changing compartment marks (${found.join("; ")})`,
  );
  return { ...rewritten, forced: true };
}

function patchText(line: CommandLine): string {
  const file = flagValue(line, "patch-file");
  if (file === undefined || file === "") return flagValue(line, "patch") ?? "";
  try {
    return readFileSync(file, "utf8");
  } catch (e) {
    throw new SvcError(
      "usage",
      `--patch-file ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`,
    );
  }
}

/** `--labels` and `--annotations` of run and expose. */
function createdMarks(line: CommandLine, current: string): string[] {
  const found: string[] = [];
  for (const pair of flagValues(line, "labels").flatMap((v) => v.split(","))) {
    const [key, value = ""] = pair.split("=");
    if (isMarkLabel(key ?? "") && value.toUpperCase() !== current) found.push(`--labels ${pair}`);
  }
  for (const pair of flagValues(line, "annotations")) {
    const key = pair.split("=")[0] ?? "";
    if (isMarkAnnotation(key)) found.push(`--annotations ${pair}`);
  }
  return found;
}

/**
 * What expose (without --labels) and create job --from copy from another object. expose -f takes the
 * labels of the file's objects as written: svc reads the files once, checks those, and hands kubectl the
 * same objects on standard input.
 */
async function copiedFrom(g: GuardInput, command: string): Promise<{ found: string[]; stdin?: string }> {
  const describe = (objects: object[]) =>
    objects.flatMap((o) =>
      foreignCompartments(o, g.active.label).map(
        (c) =>
          `${describeObject(o as Record<string, unknown>)} is labelled ${COMPARTMENT_LABEL}=${c} and its labels are copied`,
      ),
    );
  if (command === "expose" && (filenames(g.line).length > 0 || flagValues(g.line, "kustomize").length > 0)) {
    const objects = await readManifests(g);
    return {
      found: flagValues(g.line, "labels").length === 0 ? describe(objects) : [],
      stdin: toKubectlInput(objects),
    };
  }
  if (command === "expose" && flagValues(g.line, "labels").length === 0)
    return { found: describe(g.lookup.objects(g.line.positionals)) };
  const from = command === "create job" ? flagValue(g.line, "from") : undefined;
  return { found: from ? describe(g.lookup.objects([from])) : [] };
}
