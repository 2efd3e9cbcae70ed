import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { parse } from "yaml";
import { marksOf } from "../../lib/kube/marks.ts";
import { tempDir } from "../support/dev-api.ts";
import { BUN, ROOT } from "../support/proc.ts";

/**
 * `svc __edit-guard FILE`, the editor step kubectl runs for svc edit (cmd/svc/guards/edit.ts), run here as
 * kubectl runs it: the user's editor works on a private copy, and kubectl's FILE gets exactly the bytes
 * svc checked, or nothing. An editor that leaves a process behind to rewrite the file after svc's check
 * cannot change what kubectl sends.
 */
const dir = tempDir("svc-edit-guard-");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const ORIGINAL = `# Please edit the object below. Lines beginning with a '#' will be ignored,
# and an empty file will abort the edit.
apiVersion: v1
data:
  k: v
kind: ConfigMap
metadata:
  labels:
    svc.io/compartment: US-TS-ALPHA
  name: cm-own
  namespace: alpha
`;
const BASELINE = JSON.stringify({ "ConfigMap/cm-own": [...marksOf(parse(ORIGINAL))] });

let round = 0;
/** One editor step: kubectl's file, an editor script, and what svc left in kubectl's file. */
function editStep(script: string, suffix = ".yaml", env: Record<string, string> = {}) {
  round++;
  const file = join(dir, `kubectl-edit-${round}${suffix}`);
  const editor = join(dir, `editor-${round}.sh`);
  const report = join(dir, `refused-${round}`);
  writeFileSync(file, ORIGINAL);
  writeFileSync(editor, `#!/bin/sh\n${script}\n`, { mode: 0o755 });
  const r = Bun.spawnSync([BUN, "cmd/svc.ts", "__edit-guard", file], {
    cwd: ROOT,
    env: {
      ...process.env,
      SVC_EDIT_BASELINE: BASELINE,
      SVC_EDIT_EDITOR: editor,
      SVC_EDIT_REPORT: report,
      ...env,
    },
    timeout: 30_000,
  });
  let refused = "";
  try {
    refused = readFileSync(report, "utf8");
  } catch {}
  return { file, code: r.exitCode, err: r.stderr.toString(), sent: readFileSync(file), refused };
}

const fifo = (name: string) => {
  const path = join(dir, name);
  expect(Bun.spawnSync(["mkfifo", path]).exitCode).toBe(0);
  return path;
};

describe("svc edit's editor step", () => {
  test("a process the editor leaves behind cannot change what kubectl sends after svc's check", () => {
    const go = fifo("go");
    const done = fifo("done");
    const seen = join(dir, "seen");
    const checked = join(dir, "checked.yaml");
    // The editor makes an acceptable change and exits 0, leaving a process that relabels the file it was
    // given once the test says so (after svc has exited, when kubectl would read its file).
    const r = editStep(
      [
        `printf '%s\\n' "$1" > '${seen}'`,
        `stat -c %a "$(dirname "$1")" >> '${seen}'`,
        `sed -i 's/^  k: v$/  k: edited/' "$1"`,
        `cp "$1" '${checked}'`,
        `( read x < '${go}'; sed -i 's/US-TS-ALPHA/UK-S-BRAVO/' "$1"; echo "rewrote $?" > '${done}' ) </dev/null >/dev/null 2>&1 &`,
        "exit 0",
      ].join("\n"),
    );
    expect(`${r.code} ${r.err}`).toBe("0 ");
    // Let the lingering process rewrite its file, and wait until it has.
    const late = Bun.spawnSync(["sh", "-c", 'echo go > "$1" && cat "$2"', "sh", go, done], {
      timeout: 30_000,
    });
    expect(late.stdout.toString()).toStartWith("rewrote");
    // kubectl's file, read after the rewrite as kubectl would read it, holds the bytes svc checked: what
    // the editor left when it exited.
    const sent = readFileSync(r.file);
    expect(sent.equals(readFileSync(checked))).toBe(true);
    expect(sent.toString()).toContain("k: edited");
    expect(sent.toString()).toContain("svc.io/compartment: US-TS-ALPHA");
    // The editor was given a copy in a directory only svc's user can enter, never kubectl's path.
    const [given, mode] = readFileSync(seen, "utf8").trim().split("\n");
    expect(given).not.toContain("kubectl-edit-");
    expect(given).toEndWith(".yaml");
    expect(mode).toBe("700");
  });

  test("the checked bytes go to kubectl exactly, the suffix of kubectl's file is kept", () => {
    const seen = join(dir, "seen-json");
    const r = editStep(
      `printf '%s\\n' "$1" > '${seen}'; printf '\\357\\273\\277# caf\\303\\251\\r\\n' > "$1.new"; cat "$1" >> "$1.new"; printf 'x: 1' >> "$1.new"; mv "$1.new" "$1"`,
      ".json",
    );
    expect(`${r.code} ${r.err}`).toBe("0 ");
    expect(readFileSync(seen, "utf8").trim()).toEndWith(".json");
    const expected = Buffer.concat([
      Buffer.from([0xef, 0xbb, 0xbf]),
      Buffer.from("# café\r\n"),
      Buffer.from(ORIGINAL),
      Buffer.from("x: 1"),
    ]);
    expect(r.sent.equals(expected)).toBe(true);
  });

  test.each([
    [
      "a changed compartment label",
      `sed -i 's/US-TS-ALPHA/UK-S-BRAVO/' "$1"`,
      "Cannot change the compartment",
    ],
    [
      "an added mls annotation",
      `sed -i 's/^  labels:$/  annotations:\\n    mls.svc.dev\\/x: y\\n  labels:/' "$1"`,
      "Cannot change the compartment",
    ],
    ["a renamed object", `sed -i 's/name: cm-own/name: cm-other/' "$1"`, "svc cannot tell which object"],
    ["broken YAML", `printf 'a: [\\n' >> "$1"`, "svc cannot read what was edited"],
    ["bytes that are not UTF-8", `printf '# \\377\\n' >> "$1"`, "the file is not UTF-8"],
    ["a removed file", `rm "$1"`, "svc cannot read what was edited"],
  ])("%s: refused with exit 1, kubectl's file untouched, the refusal reported", (_, script, message) => {
    const r = editStep(script);
    expect(r.code).toBe(1);
    expect(r.err).toContain(message);
    expect(r.refused).toContain(message);
    expect(r.sent.toString()).toBe(ORIGINAL);
  });

  test("a signal while the editor runs: the copy is removed, kubectl's file untouched", async () => {
    const [started, release, done] = ["started", "release", "released"].map(fifo) as [string, string, string];
    const seen = join(dir, "seen-signal");
    const file = join(dir, "kubectl-edit-signal.yaml");
    const editor = join(dir, "editor-signal.sh");
    writeFileSync(file, ORIGINAL);
    writeFileSync(
      editor,
      `#!/bin/sh\nprintf '%s\\n' "$1" > '${seen}'\necho started > '${started}'\nread x < '${release}'\nsed -i 's/^  k: v$/  k: edited/' "$1"\necho "$?" > '${done}'\n`,
      { mode: 0o755 },
    );
    const step = Bun.spawn([BUN, "cmd/svc.ts", "__edit-guard", file], {
      cwd: ROOT,
      env: { ...process.env, SVC_EDIT_BASELINE: BASELINE, SVC_EDIT_EDITOR: editor },
      stdio: ["ignore", "ignore", "ignore"],
    });
    expect(Bun.spawnSync(["cat", started], { timeout: 30_000 }).stdout.toString()).toBe("started\n");
    step.kill("SIGTERM");
    expect(await step.exited).toBe(143);
    const given = readFileSync(seen, "utf8").trim();
    expect(existsSync(dirname(given))).toBe(false);
    // The editor, still running, finds its copy gone; kubectl's file is as kubectl wrote it.
    const late = Bun.spawnSync(["sh", "-c", 'echo go > "$1" && cat "$2"', "sh", release, done], {
      timeout: 30_000,
    });
    expect(late.stdout.toString()).not.toBe("0\n");
    expect(readFileSync(file, "utf8")).toBe(ORIGINAL);
  });

  test("an editor that fails: its status, kubectl's file untouched", () => {
    const r = editStep(`sed -i 's/^  k: v$/  k: edited/' "$1"; exit 3`);
    expect(r.code).toBe(3);
    expect(r.sent.toString()).toBe(ORIGINAL);
    expect(r.refused).toBe("");
  });
});
