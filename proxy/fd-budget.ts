/**
 * How many sockets the listeners may hold at once, so that the process never runs out of file descriptors:
 * at that point accepting fails, and the event loop would retry the listening socket without end (one
 * core at 100%, measured). The budget is the soft RLIMIT_NOFILE, less what was open when it was made
 * (the Workload API connection, logs, other listeners), less a reserve. Each caller connection counts
 * twice: once for itself and once for the upstream connection it uses (pooled idle connections are at
 * most as many as callers were at once). Past the budget, new callers are closed at once; established
 * ones keep being served.
 */
import { readdirSync, readFileSync } from "node:fs";
import type { Logger } from "./log.ts";

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

class FdBudget {
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

/** The process-wide budget, made when the first listener starts. */
function fdBudget(): FdBudget {
  shared ??= new FdBudget();
  return shared;
}

/**
 * A listener's door to the budget: `admit` takes two descriptors for a new caller connection, or closes
 * it at once (`close`) when the budget is spent, logging refusals at most every 10 s; `release` gives
 * them back when the connection closes.
 */
export function fdGate(log: Logger): { admit(close: () => void): boolean; release(): void } {
  const budget = fdBudget();
  let refused = 0;
  let refusedLogged = 0;
  return {
    admit(close) {
      if (budget.take(2)) return true;
      close();
      refused++;
      const now = Date.now();
      if (now - refusedLogged >= 10_000) {
        log.warn("file descriptors nearly exhausted: new connections are closed", {
          refused,
          sockets: budget.live,
          limit: budget.limit,
        });
        refused = 0;
        refusedLogged = now;
      }
      return false;
    },
    release: () => budget.give(2),
  };
}

/** Guards a node:net based server: each connection it accepts goes through `fdGate`. */
export function guardDescriptors(
  server: { on(event: "connection", listener: (socket: import("node:net").Socket) => void): unknown },
  log: Logger,
): void {
  const gate = fdGate(log);
  server.on("connection", (socket) => {
    if (gate.admit(() => socket.destroy())) socket.once("close", () => gate.release());
  });
}
