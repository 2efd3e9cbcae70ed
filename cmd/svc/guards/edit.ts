import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { flagSet, flagValues } from "../../../lib/kube/grammar.ts";
import { describeObject } from "../../../lib/kube/inject.ts";
import { changedMarks, type Marks, marksOf } from "../../../lib/kube/marks.ts";
import { type Guarded, type GuardInput, refuseUnlessOverridden } from "./guard.ts";

/**
 * `edit` and `apply edit-last-applied`: what the user changes in the editor cannot be read from the
 * command line, so svc stands between kubectl and the editor. It reads the live objects first (for
 * edit-last-applied, their last-applied configuration) and records their compartment marks; kubectl then
 * runs with KUBE_EDITOR set to `svc __edit-guard`, which opens the user's own editor (KUBE_EDITOR, EDITOR,
 * else vi — read as kubectl reads them) and, when it closes, compares the marks of every object in the
 * file with the recorded ones. A change is refused: the editor step fails, so kubectl applies nothing.
 * kubectl re-opens the editor after some errors; each time the file is compared with the live objects,
 * never with the previous round.
 */
const LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration";

/** Marks by object; null where two objects share a kind and name (svc cannot tell them apart). */
type Baseline = Record<string, [string, string][] | null>;

/** Objects are matched by kind and name: a last-applied configuration may not carry its namespace. */
const keyOf = (o: unknown): string => {
  const x = (o ?? {}) as { kind?: unknown; metadata?: { name?: unknown } };
  return `${String(x.kind)}/${String(x.metadata?.name)}`;
};

export function guardEdit(g: GuardInput): Guarded {
  const words = [
    ...g.line.positionals,
    ...flagValues(g.line, "filename").flatMap((f) => ["--filename", f]),
    ...flagValues(g.line, "kustomize").flatMap((k) => ["--kustomize", k]),
    ...(flagSet(g.line, "recursive") ? ["--recursive"] : []),
  ];
  const live = g.lookup.objects(words);
  const targets = live.map((o) => describeObject(o as Record<string, unknown>));
  if (flagSet(g.line, "force")) {
    refuseUnlessOverridden(g, "", `${g.line.path.join(" ")} without the compartment check`);
    return { targets, forced: true };
  }
  const lastApplied = g.line.path[0] === "apply";
  const baseline: Baseline = {};
  for (const o of live) {
    const source = lastApplied ? parseLastApplied(o.metadata?.annotations?.[LAST_APPLIED]) : o;
    baseline[keyOf(o)] = Object.hasOwn(baseline, keyOf(o)) ? null : [...marksOf(source)];
  }
  const dir = mkdtempSync(join(tmpdir(), "svc-edit-"));
  const report = join(dir, "refused");
  writeFileSync(join(dir, "baseline.json"), JSON.stringify(baseline), { mode: 0o600 });
  const self = [process.execPath, ...(process.argv[1]?.endsWith(".ts") ? [process.argv[1]] : [])];
  return {
    targets,
    env: {
      KUBE_EDITOR: `${self.map(shellQuote).join(" ")} __edit-guard`,
      SVC_EDIT_EDITOR: process.env.KUBE_EDITOR || process.env.EDITOR || "vi",
      SVC_EDIT_BASELINE: join(dir, "baseline.json"),
      SVC_EDIT_REPORT: report,
    },
    after: () => {
      let refused = false;
      try {
        refused = readFileSync(report, "utf8") !== "";
      } catch {}
      rmSync(dir, { recursive: true, force: true });
      return refused ? "refused" : undefined;
    },
  };
}

function parseLastApplied(text: string | undefined): unknown {
  try {
    return text ? JSON.parse(text) : {};
  } catch {
    return {};
  }
}

const shellQuote = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;

/** kubectl's way of running an editor command: alone, split at spaces, or through sh when quoted. */
function editorArgv(editor: string, file: string): string[] {
  if (!editor.includes(" ")) return [editor, file];
  if (!/["'\\]/.test(editor)) return [...editor.split(" ").filter(Boolean), file];
  return ["sh", "-c", `${editor} ${shellQuote(file)}`];
}

/** `svc __edit-guard FILE`: the editor kubectl runs (see above). Exits with the editor's status or 1. */
export async function editGuard(file: string): Promise<never> {
  const editor = process.env.SVC_EDIT_EDITOR || "vi";
  const child = Bun.spawn(editorArgv(editor, file), { stdio: ["inherit", "inherit", "inherit"] });
  const status = await child.exited;
  if (status !== 0) process.exit(status);
  const baseline = JSON.parse(readFileSync(process.env.SVC_EDIT_BASELINE ?? "", "utf8")) as Baseline;
  const problems: string[] = [];
  let objects: unknown[];
  try {
    objects = parseAllDocuments(readFileSync(file, "utf8")).flatMap((d) => {
      const v = d.toJS() as { kind?: string; items?: unknown[] } | null;
      return v?.kind === "List" && Array.isArray(v.items) ? v.items : v ? [v] : [];
    });
  } catch {
    process.exit(0); // kubectl reports the broken file and opens the editor again
  }
  for (const o of objects) {
    const before = Object.hasOwn(baseline, keyOf(o)) ? baseline[keyOf(o)] : undefined;
    if (!before) {
      problems.push(
        `svc cannot tell which object being edited ${describeObject(o as Record<string, unknown>)} is`,
      );
      continue;
    }
    const changes = changedMarks(new Map(before) as Marks, marksOf(o));
    if (changes.length > 0)
      problems.push(`${describeObject(o as Record<string, unknown>)}: ${changes.join(", ")}`);
  }
  if (problems.length === 0) process.exit(0);
  const message = `Cannot change the compartment of an object with svc edit (${problems.join("; ")}); nothing was saved`;
  process.stderr.write(`svc: ${message}\n`);
  writeFileSync(process.env.SVC_EDIT_REPORT ?? join(tmpdir(), "svc-edit-refused"), message);
  process.exit(1);
}
