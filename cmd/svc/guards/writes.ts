import { readFileSync } from "node:fs";
import { SvcError } from "../../../lib/errors.ts";
import { type CommandLine, flagSet, flagValue, flagValues } from "../../../lib/kube/grammar.ts";
import { isMarkAnnotation, isMarkLabel, markArguments, patchTouchesMarks } from "../../../lib/kube/marks.ts";
import { type Guarded, type GuardInput, refuseUnlessOverridden } from "./guard.ts";

/**
 * label, annotate, patch, run and expose: writes that name the compartment marks (the
 * `svc.io/compartment` label, the `mls.svc.dev/*` annotations) are refused — moving an object between
 * compartments, or out of all of them, takes `--force` and the cluster's override permission. Read from
 * the command line alone: whatever value a mark would get, the write is refused, so no lookup is needed.
 * `--local` and `--dry-run=client` never reach the cluster and pass.
 */
const offline = (line: CommandLine) => flagSet(line, "local") || flagValue(line, "dry-run") === "client";

export function guardMarkWrites(g: GuardInput): Guarded {
  const { line } = g;
  const command = line.path.join(" ");
  const targets = line.positionals.filter((p) => !p.includes("=") && !p.endsWith("-"));
  if (offline(line)) return { targets };
  const found =
    command === "patch"
      ? patchTouchesMarks(flagValue(line, "type") || "strategic", patchText(line))
      : command === "label" || command === "annotate"
        ? markArguments(line.positionals, command === "annotate")
        : createdMarks(line, g.active.label);
  if (found.length === 0) return { targets };
  refuseUnlessOverridden(
    g,
    `Cannot change the compartment of an object with svc ${command} (${found.join("; ")})`,
    `${command} changing compartment marks (${found.join("; ")})`,
  );
  return { targets, forced: true };
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

/**
 * `run` and `expose` create an object: `--labels` and `--annotations` that give it another compartment's
 * marks are refused; `--overrides` is read as the patch it is.
 */
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
  const overrides = flagValue(line, "overrides");
  if (overrides)
    found.push(
      ...patchTouchesMarks(flagValue(line, "override-type") || "merge", overrides).map(
        (f) => `--overrides ${f}`,
      ),
    );
  return found;
}
