/**
 * Calls `report` at most once per `everyMs`: the first message at once, the others counted and summed up
 * (with the latest of them) when the interval is over.
 */
export function throttled(report: (message: string) => void, everyMs: number): (message: string) => void {
  let last = Number.NEGATIVE_INFINITY;
  let left = 0;
  let latest = "";
  let timer: ReturnType<typeof setTimeout> | undefined;
  const summary = () => {
    timer = undefined;
    report(`${left} more turned away in the last ${everyMs / 1000}s; the latest: ${latest}`);
    last = performance.now();
    left = 0;
  };
  return (message) => {
    const now = performance.now();
    if (now - last >= everyMs && left === 0) {
      report(message);
      last = now;
      return;
    }
    left++;
    latest = message;
    if (!timer) {
      timer = setTimeout(summary, Math.max(0, last + everyMs - now));
      timer.unref();
    }
  };
}
