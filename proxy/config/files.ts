/**
 * Checks of the files on disk that the configuration names: those the proxy reads must be readable (or
 * exist), and those it writes must have an existing, writable directory.
 */
import { accessSync, constants, existsSync } from "node:fs";
import { dirname, resolve } from "node:path";
import type { Problem } from "./types.ts";

export function readable(field: string, path: string, problem: Problem): void {
  try {
    accessSync(path, constants.R_OK);
  } catch (e) {
    problem(field, `cannot read ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
}

export function exists(field: string, path: string, problem: Problem): void {
  if (!existsSync(path)) problem(field, `${JSON.stringify(path)} does not exist`);
}

export function writableParent(field: string, path: string, problem: Problem): void {
  const dir = dirname(resolve(path));
  if (!existsSync(dir)) {
    problem(
      field,
      `directory ${dir} of ${JSON.stringify(path)} does not exist (it must exist and be writable)`,
    );
    return;
  }
  try {
    accessSync(dir, constants.W_OK);
  } catch {
    problem(field, `directory ${dir} of ${JSON.stringify(path)} is not writable`);
  }
}
