import { readFileSync } from "node:fs";

/** What the benchmarks report: quantiles (interpolated), the range, and a process's CPU time from /proc. */
export function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  const at = (s.length - 1) * q;
  const lo = Math.floor(at);
  return (s[lo] as number) + ((s[Math.ceil(at)] as number) - (s[lo] as number)) * (at - lo);
}

export const median = (xs: number[]) => quantile(xs, 0.5);

/** a ÷ b with two decimals, for a report. */
export const ratio = (a: number, b: number) => (a / b).toFixed(2);

/** "min–max" with `digits` decimals. */
export const range = (xs: number[], digits: number) =>
  `${Math.min(...xs).toFixed(digits)}–${Math.max(...xs).toFixed(digits)}`;

/** "median (first quartile–third quartile)" with one decimal. */
export const medianIqr = (xs: number[]) =>
  `${median(xs).toFixed(1)} (${quantile(xs, 0.25).toFixed(1)}–${quantile(xs, 0.75).toFixed(1)})`;

/** User + system CPU time of a process so far, in µs (from /proc/<pid>/stat, 100 ticks a second). */
export function cpuUs(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
  return (Number(f[11]) + Number(f[12])) * 10_000;
}
