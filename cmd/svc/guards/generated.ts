import { SvcError } from "../../../lib/errors.ts";
import { commandWords } from "../../../lib/kube/grammar.ts";
import { describeObject, injectMls } from "../../../lib/kube/inject.ts";
import { toKubectlInput } from "../../../lib/kube/manifests.ts";
import { type Guarded, type GuardInput, refuseUnlessOverridden } from "./guard.ts";
import { labelledElsewhere } from "./manifests.ts";

/**
 * The commands that make objects from their arguments — `create SUBCOMMAND` (secret, configmap,
 * deployment, job, service …; `create token` has its own guard), `expose` and `autoscale` — mark what they make as
 * `svc apply` does (docs/svc-config.md, "svc create, run and expose"). svc has kubectl make the objects
 * without sending them (`--dry-run=client -o json`, with the user's own arguments and cluster target),
 * refuses one labelled for another compartment (expose copies the labels of what it exposes, create job
 * --from its cron job's), marks each and its pod templates and selectors, and hands them to `kubectl
 * create -f -` with the user's output, dry-run and save-config flags. What kubectl cannot make is its
 * error, and nothing is created.
 */

/** The flags of the user's command that the final `create -f -` takes over (the rest made the objects). */
const FINAL = new Set([
  "dry-run",
  "output",
  "template",
  "save-config",
  "validate",
  "field-manager",
  "show-managed-fields",
  "allow-missing-template-keys",
]);

export function guardGenerated(g: GuardInput): Guarded {
  const { line } = g;
  const command = line.path.join(" ");
  const words = (keep: (name: string, global: boolean) => boolean) =>
    line.flags
      .filter((f) => keep(f.name, f.global))
      .flatMap((f) => f.words.map((i) => line.args[i] as string));
  // The command's own words, without the output flags and the global ones (the look-up adds those).
  const drop = new Set(
    line.flags.filter((f) => f.global || FINAL.has(f.name) || g.own.has(f.name)).flatMap((f) => f.words),
  );
  const making = line.args.filter((_, i) => !drop.has(i) && !line.pathWords.includes(i));
  const made = g.lookup.run([...commandWords(line), ...making, "--dry-run=client", "-o", "json"]);
  if (made.code !== 0)
    throw new SvcError("usage", `svc ${command}: ${made.err.trim() || `kubectl exited ${made.code}`}`);
  let doc: Record<string, unknown>;
  try {
    doc = JSON.parse(made.out) as Record<string, unknown>;
  } catch {
    throw new SvcError("kube_api", `svc ${command}: kubectl printed no JSON object to mark`);
  }
  const objects = (Array.isArray(doc.items) ? doc.items : [doc]) as Record<string, unknown>[];
  g.targets.push(...objects.map(describeObject));
  const { problems, foreign } = labelledElsewhere(g, objects);
  const forced = problems.length > 0;
  if (forced)
    refuseUnlessOverridden(
      g,
      `Cannot ${command} across compartments: ${problems.join("; ")}`,
      `${command} across compartments (${problems.join("; ")})`,
    );
  // An object written for another compartment (let through only by the override) is created as made.
  for (const o of objects) if (!foreign.has(o)) injectMls(o, g.active);
  return {
    command: ["create"],
    args: ["-f", "-", ...words((name, global) => global || FINAL.has(name))],
    stdin: toKubectlInput(objects),
    ...(forced ? { forced } : {}),
  };
}
