import { describe, expect, test } from "bun:test";
import { highlightMls, wantsColor } from "../../lib/kube/highlight.ts";

describe("describe highlighting", () => {
  test("MLS labels and annotations are highlighted, nothing else", () => {
    const text =
      "Labels:       app=web\n              svc.io/compartment=US-TS-ALPHA\nAnnotations:  mls.svc.dev/level: us:ts\n";
    const out = highlightMls(text);
    expect(out).toContain("\u001b[1;33msvc.io/compartment=US-TS-ALPHA\u001b[0m");
    expect(out).toContain("\u001b[1;33mmls.svc.dev/level: us:ts\u001b[0m");
    expect(out).toContain("app=web\n");
    expect(out.replaceAll("\u001b[1;33m", "").replaceAll("\u001b[0m", "")).toBe(text);
  });
  test("only on a terminal, and never with NO_COLOR or TERM=dumb", () => {
    expect(wantsColor(true, {})).toBe(true);
    expect(wantsColor(false, {})).toBe(false);
    expect(wantsColor(true, { NO_COLOR: "1" })).toBe(false);
    expect(wantsColor(true, { TERM: "dumb" })).toBe(false);
  });
});
