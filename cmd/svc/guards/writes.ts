import { readFileSync } from "node:fs";
import { SvcError } from "../../../lib/errors.ts";
import { beforeDashes, type CommandLine, flagSet, flagValue, flagValues } from "../../../lib/kube/grammar.ts";
import { mlsMarks } from "../../../lib/kube/inject.ts";
import { markArguments, marksInPatch, parsePatch } from "../../../lib/kube/marks.ts";
import { isMarkAnnotation, isMarkLabel } from "../../../lib/kube/mls.ts";
import { type Guarded, type GuardInput, refuseUnlessOverridden, restWithout } from "./guard.ts";

/**
 * label, annotate, patch and run: writes that would give an object compartment marks (the
 * `svc.io/compartment` label, the `mls.svc.dev/*` annotations) other than it has are refused — moving an
 * object between compartments, or out of all of them, takes `--force` and the cluster's override
 * permission.
 * - label, annotate, patch: any mark named, whatever its value (putting an object into a compartment is
 *   svc apply's job). A patch, and run's `--overrides`, are parsed as kubectl parses them and handed to
 *   kubectl as the JSON svc checked (a patch file is read once).
 * - run: `--labels` of another compartment, `--annotations` naming a mark. The pod it makes is marked for
 *   the current compartment through the same flags (`--labels` keeps run's default `run=NAME`), so an
 *   interactive `run -it --rm` stays kubectl's own.
 * `--local` and `--dry-run=client` never reach the cluster and pass (run's marks are still added, so the
 * preview shows them). create and expose make objects svc marks whole (generated.ts).
 */
/** `--dry-run` alone or `=true` is kubectl's old spelling of client. */
const offline = (line: CommandLine) =>
  flagSet(line, "local") || ["client", "", "true"].includes(flagValue(line, "dry-run") ?? "none");

export async function guardMarkWrites(g: GuardInput): Promise<Guarded> {
  const { line } = g;
  const command = line.path.join(" ");
  g.targets.push(...line.positionals.filter((p) => !p.includes("=") && !p.endsWith("-")));
  if (offline(line))
    return command === "run" ? { args: beforeDashes(restWithout(g, "labels"), runMarks(g)) } : {};
  // What svc read is what kubectl gets: flags svc took in are dropped, their checked form added.
  const drop: string[] = [];
  const extra: string[] = [];
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
    drop.push("labels");
    extra.push(...runMarks(g));
  }
  const rewritten: Guarded = drop.length > 0 ? { args: beforeDashes(restWithout(g, ...drop), extra) } : {};
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

/** `--labels` and `--annotations` of run (expose makes its objects through generated.ts). */
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
 * The flags that mark the pod `run` makes: its `--labels` (run's default `run=NAME` when none were given)
 * with the compartment label added, and the MLS annotations. A label of another compartment (let through
 * only by the override) stays as given.
 */
function runMarks(g: GuardInput): string[] {
  const marks = mlsMarks(g.active);
  const given = flagValue(g.line, "labels") || `run=${g.line.positionals[0] ?? ""}`;
  const labelled = given.split(",").some((pair) => isMarkLabel(pair.split("=")[0] ?? ""));
  const labels = labelled
    ? given
    : [given, ...Object.entries(marks.labels).map(([k, v]) => `${k}=${v}`)].join(",");
  return [
    `--labels=${labels}`,
    ...Object.entries(marks.annotations).map(([k, v]) => `--annotations=${k}=${v}`),
  ];
}
