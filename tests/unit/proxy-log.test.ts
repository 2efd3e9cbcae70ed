import { describe, expect, test } from "bun:test";
import { createLogger, type LogOptions } from "../../proxy/log.ts";

/**
 * svc-proxy's structured log (docs/proxy-configuration.md, "Logging"): levels, bound fields, and an Error
 * in a field, which is logged as its message, with its stack as `stacktrace` from -zap-stacktrace-level up.
 */
function logged(o: Omit<LogOptions, "write">) {
  const lines: string[] = [];
  return { log: createLogger({ ...o, write: (l) => lines.push(l) }), lines };
}
const json = (lines: string[]) => lines.map((l) => JSON.parse(l));

describe("proxy log", () => {
  test("lines below the level are dropped; bound fields come with every line", () => {
    const { log, lines } = logged({ level: "warn", encoder: "json" });
    const l = log.with({ listener: "web" });
    l.info("not shown");
    l.warn("shown", { peer: "x" });
    expect(json(lines).map(({ ts: _, ...rest }) => rest)).toEqual([
      { level: "warn", msg: "shown", listener: "web", peer: "x" },
    ]);
  });

  test("an Error is logged as its message, and its stack from the stacktrace level up", () => {
    const { log, lines } = logged({ level: "debug", encoder: "json", stacktraceLevel: "error" });
    const e = new Error("broken");
    log.warn("below", { error: e });
    log.error("at", { error: e, other: new Error("second") });
    const [below, at] = json(lines);
    expect(below).toMatchObject({ msg: "below", error: "broken" });
    expect(below.stacktrace).toBeUndefined();
    expect(at).toMatchObject({ msg: "at", error: "broken", other: "second" });
    // The first error's stack, with the place it was made.
    expect(at.stacktrace).toBe(e.stack);
    expect(at.stacktrace).toContain("proxy-log.test.ts");
  });

  test("a lower stacktrace level adds stacks to warnings; without one, no line has a stack", () => {
    const low = logged({ level: "debug", encoder: "json", stacktraceLevel: "warn" });
    low.log.warn("w", { error: new Error("x") });
    low.log.info("i", { error: new Error("y") });
    const [w, i] = json(low.lines);
    expect(w.stacktrace).toContain("Error: x");
    expect(i.stacktrace).toBeUndefined();
    const none = logged({ level: "debug", encoder: "json" });
    none.log.error("e", { error: new Error("z") });
    expect(json(none.lines)[0]).not.toHaveProperty("stacktrace");
  });

  test("the console encoder writes the message of an Error, not an empty object", () => {
    const { log, lines } = logged({ level: "info", encoder: "console", stacktraceLevel: "error" });
    log.error("failed", { error: new Error("broken") });
    expect(lines[0]).toMatch(/\tERROR\tfailed\t\{"error":"broken","stacktrace":"Error: broken\\n/);
  });
});
