/**
 * `edit` and `apply edit-last-applied`: what the user changes in the editor cannot be read from the
 * command line, so svc stands between kubectl and the editor. It reads the live objects first (for
 * edit-last-applied, their last-applied configuration) and records their compartment marks; kubectl then
 * runs with KUBE_EDITOR set to `svc __edit-guard`, which opens the user's own editor (KUBE_EDITOR, EDITOR,
 * else vi — read as kubectl reads them) on a private copy of kubectl's file and, when it closes, compares
 * the marks of every object in the copy with the recorded ones and hands kubectl exactly the bytes it
 * checked. A change is refused: the editor step fails, so kubectl applies nothing.
 * kubectl re-opens the editor after some errors; each time the file is compared with the live objects,
 * never with the previous round.
 */
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { extname, join } from "node:path";
import { SvcError } from "../../../lib/errors.ts";
import { filenames, flagSet, flagValues } from "../../../lib/kube/grammar.ts";
import { describeObject } from "../../../lib/kube/inject.ts";
import { parseObjects } from "../../../lib/kube/manifests.ts";
import { changedMarks, marksOf, type PlacedMarks } from "../../../lib/kube/marks.ts";
import { say } from "../../say.ts";
import { type Guarded, type GuardInput, refuseUnlessOverridden } from "./guard.ts";
import { refuseDataReads } from "./reads.ts";

const LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration";

/** PlacedMarks by object; null where two objects share a kind and name (svc cannot tell them apart). */
type Baseline = Record<string, [string, string][] | null>;

/** Objects are matched by kind and name: a last-applied configuration may not carry its namespace. */
const keyOf = (o: unknown): string => {
  const x = (o ?? {}) as { kind?: unknown; metadata?: { name?: unknown } };
  return `${String(x.kind)}/${String(x.metadata?.name)}`;
};

export function guardEdit(g: GuardInput): Guarded {
  const words = [
    ...g.line.positionals,
    ...filenames(g.line).flatMap((f) => ["--filename", f]),
    ...flagValues(g.line, "kustomize").flatMap((k) => ["--kustomize", k]),
    ...(flagSet(g.line, "recursive") ? ["--recursive"] : []),
  ];
  const live = g.lookup.objects(words);
  g.targets.push(...live.map((o) => describeObject(o as Record<string, unknown>)));
  if (flagSet(g.line, "force")) {
    refuseUnlessOverridden(g, "", `${g.line.path.join(" ")} without the compartment check`);
    return { forced: true };
  }
  // The editor shows a Secret's or ConfigMap's data: another compartment's is refused as a read (without
  // --force, handled above).
  refuseDataReads(g, live);
  const lastApplied = g.line.path[0] === "apply";
  const baseline: Baseline = {};
  for (const o of live) {
    const source = lastApplied ? parseLastApplied(o.metadata?.annotations?.[LAST_APPLIED]) : o;
    baseline[keyOf(o)] = Object.hasOwn(baseline, keyOf(o)) ? null : [...marksOf(source)];
  }
  // kubectl runs KUBE_EDITOR directly when it has no space or quote, through $SHELL otherwise (which
  // the user could point anywhere): svc's editor step is a script at a plain path.
  if (/[\s"'\\]/.test(tmpdir()))
    throw new SvcError(
      "usage",
      `svc edit needs a temporary directory without spaces or quotes (${tmpdir()}); set TMPDIR to one`,
    );
  const dir = mkdtempSync(join(tmpdir(), "svc-edit-"));
  const editor = join(dir, "editor");
  const self = [process.execPath, ...(process.argv[1]?.endsWith(".ts") ? [process.argv[1]] : [])];
  writeFileSync(editor, `#!/bin/sh\nexec ${self.map(shellQuote).join(" ")} __edit-guard "$@"\n`, {
    mode: 0o700,
  });
  const report = join(dir, "refused");
  return {
    env: {
      KUBE_EDITOR: editor,
      SVC_EDIT_EDITOR: process.env.KUBE_EDITOR || process.env.EDITOR || "vi",
      SVC_EDIT_BASELINE: JSON.stringify(baseline),
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

/**
 * `svc __edit-guard FILE`: the editor kubectl runs (see above). The user's editor works on a copy of FILE
 * in a directory only svc's user can enter, made for this round; it is not given kubectl's path. svc
 * reads the copy once, checks those bytes and, when they pass, writes exactly them to FILE: what the
 * editor or a process it leaves behind writes afterwards never reaches kubectl. Exits with the editor's
 * status, 0 with FILE written, or 1 with FILE untouched when svc refuses; the copy is removed, on a
 * signal too.
 */
export async function editGuard(file: string): Promise<never> {
  const recorded = process.env.SVC_EDIT_BASELINE;
  if (!recorded || !file)
    throw new SvcError("usage", "svc __edit-guard is the editor step of svc edit; it is not run by hand");
  const baseline = JSON.parse(recorded) as Baseline;
  const dir = mkdtempSync(join(tmpdir(), "svc-edit-copy-"));
  const remove = () => rmSync(dir, { recursive: true, force: true });
  for (const [signal, n] of SIGNALS)
    process.on(signal, () => {
      remove();
      process.exit(128 + n);
    });
  let status: number;
  try {
    chmodSync(dir, 0o700);
    // The file's suffix (.yaml, .json) is kept so that the editor picks its mode.
    status = await editCopy(file, join(dir, `edit${extname(file)}`), baseline);
  } finally {
    remove();
  }
  process.exit(status);
}

const SIGNALS = [
  ["SIGHUP", 1],
  ["SIGINT", 2],
  ["SIGTERM", 15],
] as const;

/** The editor on `copy`, then the check; kubectl's `file` gets the checked bytes or nothing. */
async function editCopy(file: string, copy: string, baseline: Baseline): Promise<number> {
  writeFileSync(copy, readFileSync(file), { mode: 0o600, flag: "wx" });
  const child = Bun.spawn(editorArgv(process.env.SVC_EDIT_EDITOR || "vi", copy), {
    stdio: ["inherit", "inherit", "inherit"],
  });
  const status = await child.exited;
  if (status !== 0) return status;
  let edited: Buffer;
  let objects: Record<string, unknown>[];
  try {
    edited = readFileSync(copy);
    objects = parseObjects([{ name: "the edited file", text: utf8(edited) }]);
  } catch (e) {
    return refuse(`svc cannot read what was edited (${(e as Error).message}); nothing was saved`);
  }
  const problems: string[] = [];
  for (const o of objects) {
    const before = Object.hasOwn(baseline, keyOf(o)) ? baseline[keyOf(o)] : undefined;
    if (!before) {
      problems.push(`svc cannot tell which object being edited ${describeObject(o)} is`);
      continue;
    }
    const changes = changedMarks(new Map(before) as PlacedMarks, marksOf(o));
    if (changes.length > 0) problems.push(`${describeObject(o)}: ${changes.join(", ")}`);
  }
  if (problems.length > 0)
    return refuse(
      `Cannot change the compartment of an object with svc edit (${problems.join("; ")}); nothing was saved`,
    );
  writeFileSync(file, edited);
  return 0;
}

/** The edited bytes as text; bytes that are not UTF-8 are refused rather than read as something else. */
function utf8(bytes: Buffer): string {
  try {
    return new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    throw new Error("the file is not UTF-8");
  }
}

function refuse(message: string): number {
  say("svc", "error", message);
  if (process.env.SVC_EDIT_REPORT) writeFileSync(process.env.SVC_EDIT_REPORT, message);
  return 1;
}
