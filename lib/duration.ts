/**
 * Go duration strings ("300ms", "1.5h", "2h45m", units ns us µs ms s m h), as in Go's time.ParseDuration.
 * Returns milliseconds; throws with the allowed form when the text is not a duration.
 */
const UNITS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  μs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};
const PART = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)/y;

export function parseDuration(text: string): number {
  const bad = () =>
    new Error(`invalid duration ${JSON.stringify(text)}: use a Go duration such as 500ms, 30s, 2m or 1h30m`);
  let s = text.trim();
  let sign = 1;
  if (s.startsWith("-") || s.startsWith("+")) {
    sign = s.startsWith("-") ? -1 : 1;
    s = s.slice(1);
  }
  if (s === "0") return 0;
  if (s === "") throw bad();
  let total = 0;
  PART.lastIndex = 0;
  while (PART.lastIndex < s.length) {
    const m = PART.exec(s);
    if (!m) throw bad();
    total += Number(m[1]) * (UNITS[m[2] as string] as number);
  }
  return sign * total;
}
