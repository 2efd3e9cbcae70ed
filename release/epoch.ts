import { resolve } from "node:path";

/**
 * The release's time: SOURCE_DATE_EPOCH when it holds one, else the time of the commit checked out. The
 * same commit gives the same manual pages, SBOMs and image digests.
 */
export function sourceDateEpoch(): number {
  const given = Number(process.env.SOURCE_DATE_EPOCH);
  if (Number.isInteger(given) && given > 0) return given;
  const git = Bun.spawnSync(["git", "log", "-1", "--format=%ct"], {
    cwd: resolve(import.meta.dir, ".."),
    stdout: "pipe",
    stderr: "pipe",
  });
  return Number(git.stdout.toString().trim()) || 0;
}
