import { readdirSync, readFileSync } from "node:fs";

/**
 * How many sockets the relay may hold at once, so that the process never runs out of file descriptors:
 * at that point accepting fails, and the event loop would retry the listening socket without end (one
 * core at 100%, measured). The budget is the soft RLIMIT_NOFILE, less what was open when it was made
 * (the Workload API connection, logs, other listeners), less a reserve. Each caller connection counts
 * twice: once for itself and once for the upstream connection it uses (pooled idle connections are at
 * most as many as callers were at once). Past the budget, new callers are closed at once; established
 * ones keep being served.
 */
const RESERVE = 16;

function softLimit(): number | undefined {
  try {
    const m = /^Max open files\s+(\d+)/m.exec(readFileSync("/proc/self/limits", "utf8"));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

function openNow(): number {
  try {
    return readdirSync("/proc/self/fd").length;
  } catch {
    return 0;
  }
}

export class FdBudget {
  live = 0;
  readonly max: number;

  constructor(readonly limit = softLimit()) {
    this.max = limit === undefined ? Number.POSITIVE_INFINITY : Math.max(1, limit - openNow() - RESERVE);
  }

  /** Takes `n` descriptors from the budget; false when fewer are left. */
  take(n: number): boolean {
    if (this.live + n > this.max) return false;
    this.live += n;
    return true;
  }

  give(n: number): void {
    this.live = Math.max(0, this.live - n);
  }
}

let shared: FdBudget | undefined;

/** The process-wide budget, made when the first relay listener starts. */
export function fdBudget(): FdBudget {
  shared ??= new FdBudget();
  return shared;
}
