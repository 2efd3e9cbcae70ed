import { readFileSync } from "node:fs";
import { SvcError } from "../../../lib/errors.ts";
import { type CommandLine, filenames, flagSet, flagValue, flagValues } from "../../../lib/kube/grammar.ts";
import { COMPARTMENT_LABEL, describeObject } from "../../../lib/kube/inject.ts";
import {
  foreignCompartments,
  isMarkAnnotation,
  isMarkLabel,
  markArguments,
  marksInPatch,
  parsePatch,
} from "../../../lib/kube/marks.ts";
import { type Guarded, type GuardInput, refuseUnlessOverridden, restWithout } from "./guard.ts";

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
const offline = (line: CommandLine) => flagSet(line, "local") || flagValue(line, "dry-run") === "client";

export function guardMarkWrites(g: GuardInput): Guarded {
  const { line } = g;
  const command = line.path.join(" ");
  g.targets.push(...line.positionals.filter((p) => !p.includes("=") && !p.endsWith("-")));
  if (offline(line)) return {};
  let args: string[] | undefined;
  let found: string[];
  if (command === "patch") {
    const patch = parsePatch(patchText(line));
    found = marksInPatch((flagValue(line, "type") || "strategic").toLowerCase(), patch);
    args = [...restWithout(g, "patch", "patch-file"), `--patch=${JSON.stringify(patch)}`];
  } else if (command === "label" || command === "annotate")
    found = markArguments(line.positionals, command === "annotate");
  else {
    found = [...createdMarks(line, g.active.label), ...copiedMarks(g, command)];
    const overrides = flagValue(line, "overrides");
    if (overrides) {
      const patch = parsePatch(overrides);
      found.push(
        ...marksInPatch((flagValue(line, "override-type") || "merge").toLowerCase(), patch).map(
          (f) => `--overrides ${f}`,
        ),
      );
      args = [...restWithout(g, "overrides"), `--overrides=${JSON.stringify(patch)}`];
    }
  }
  if (found.length === 0) return args ? { args } : {};
  refuseUnlessOverridden(
    g,
    `Cannot change the compartment of an object with svc ${command} (${found.join("; ")})`,
    `${command} changing compartment marks (${found.join("; ")})`,
  );
  return { ...(args ? { args } : {}), forced: true };
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

/** What expose (without --labels) and create job --from copy from another object. */
function copiedMarks(g: GuardInput, command: string): string[] {
  let words: string[] = [];
  if (command === "expose" && flagValues(g.line, "labels").length === 0)
    words = [...g.line.positionals, ...filenames(g.line).flatMap((f) => ["--filename", f])];
  else if (command === "create job" && flagValue(g.line, "from"))
    words = [flagValue(g.line, "from") as string];
  if (words.length === 0) return [];
  return g.lookup
    .objects(words)
    .flatMap((o) =>
      foreignCompartments(o, g.active.label).map(
        (c) =>
          `${describeObject(o as Record<string, unknown>)} is labelled ${COMPARTMENT_LABEL}=${c} and its labels are copied`,
      ),
    );
}
