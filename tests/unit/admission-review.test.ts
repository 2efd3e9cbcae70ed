import { describe, expect, test } from "bun:test";
import { clearancesOf, missingClearances, parseCompartmentLabel } from "../../lib/kube/clearance.ts";
import type { Marks as PodMarks } from "../../lib/kube/mls.ts";
import { type AdmissionRequest, type ReviewDeps, review } from "../../proxy/admission/review.ts";

const ALICE = ["system:authenticated", "svc:country:us", "svc:sensitivity:ts", "svc:compartment:alpha"];

describe("clearances from groups", () => {
  const cleared = (groups: string[], label: string) => {
    const target = parseCompartmentLabel(label);
    if (!target) throw new Error(`unparsed ${label}`);
    return missingClearances(clearancesOf(groups), target);
  };

  test("country, compartment and a sensitivity at or above the label's are all needed", () => {
    expect(cleared(ALICE, "US-TS-ALPHA")).toEqual([]);
    expect(cleared(ALICE, "US-S-ALPHA")).toEqual([]);
    expect(cleared(ALICE, "US-U-ALPHA")).toEqual([]);
    expect(cleared(ALICE, "UK-TS-ALPHA")).toEqual(["country uk"]);
    expect(cleared(ALICE, "US-TS-BRAVO")).toEqual(["compartment bravo"]);
    const secret = ["svc:country:us", "svc:sensitivity:s", "svc:compartment:alpha"];
    expect(cleared(secret, "US-TS-ALPHA")).toEqual(["sensitivity ts"]);
    expect(cleared(secret, "US-C-ALPHA")).toEqual([]);
    expect(cleared([], "US-TS-ALPHA")).toEqual(["country us", "sensitivity ts", "compartment alpha"]);
  });

  test("labels are read case-insensitively; compartments may hold hyphens", () => {
    expect(cleared(ALICE, "us-ts-alpha")).toEqual([]);
    expect(parseCompartmentLabel("US-TS-RED-TEAM")).toEqual({
      country: "us",
      sensitivity: "ts",
      compartment: "red-team",
    });
  });

  test("groups that only look like clearances give none", () => {
    const odd = [
      "svc:compartment:alpha:extra",
      "svc:compartment:",
      "SVC:compartment:alpha",
      "svc:Compartment:alpha",
      "svc:sensitivity:top",
      "svc:sensitivity:__proto__",
      "xsvc:country:us",
    ];
    const c = clearancesOf(odd);
    expect(c).toEqual({ countries: [], sensitivity: -1, compartments: [] });
  });

  test("labels that are not <COUNTRY>-<SENSITIVITY>-<COMPARTMENT> are not read", () => {
    for (const bad of [
      "ALPHA",
      "US-ALPHA",
      "US-X-ALPHA",
      "US-TS-",
      "US-TS--",
      "U-TS-ALPHA",
      "US-TS-ALPHA-",
      "__proto__",
      "",
    ])
      expect(parseCompartmentLabel(bad)).toBeUndefined();
  });
});

describe("the webhook's review", () => {
  const marks = (compartment?: string, level?: string, compartmentNote?: string): PodMarks => ({
    compartment,
    level,
    compartmentNote,
  });
  const pods: Record<string, PodMarks> = {
    "alpha/a": marks("US-TS-ALPHA", "us:ts", "us:alpha"),
    "alpha/b": marks("UK-S-BRAVO"),
    "alpha/none": marks(),
    "alpha/bad": marks("BRAVO"),
    "alpha/note-only": marks(undefined, undefined, "uk:bravo"),
    "alpha/level-only": marks(undefined, "us:ts"),
    "alpha/odd-note": marks("US-TS-ALPHA", "us:top"),
    "alpha/mixed": marks("US-TS-ALPHA", undefined, "us:bravo"),
  };
  const deps = (o: Partial<ReviewDeps> & { overrides?: string[] } = {}): ReviewDeps => ({
    targetMarks: async (_kind, ns, name) =>
      Object.hasOwn(pods, `${ns}/${name}`) ? [pods[`${ns}/${name}`] as PodMarks] : null,
    entry: async () => null,
    lookup: async () => ({ found: "no" }),
    bindingsOf: async () => [],
    canOverride: async (u) => (o.overrides ?? []).includes(u.username ?? ""),
    unlabeled: o.unlabeled ?? "deny",
  });
  const req = (
    sub: string,
    name: string,
    user = "alice",
    groups = ALICE,
    extra: Partial<AdmissionRequest> = {},
  ) => ({
    uid: "u",
    resource: { group: "", version: "v1", resource: "pods" },
    subResource: sub,
    namespace: "alpha",
    name,
    operation: sub === "ephemeralcontainers" ? "UPDATE" : "CONNECT",
    userInfo: { username: user, groups },
    ...extra,
  });

  test("a pod of the requester's compartment passes; another's is refused with both named", async () => {
    expect((await review(req("exec", "a"), deps())).allowed).toBe(true);
    for (const [sub, text] of [
      ["exec", "Cannot execute in pod in another compartment (UK-S-BRAVO)"],
      ["attach", "Cannot attach to pod in another compartment (UK-S-BRAVO)"],
      ["portforward", "Cannot forward ports to pod in another compartment (UK-S-BRAVO)"],
      ["proxy", "Cannot proxy to pod in another compartment (UK-S-BRAVO)"],
    ]) {
      const v = await review(req(sub as string, "b"), deps());
      expect(v.allowed).toBe(false);
      expect(v.message).toContain(text as string);
      expect(v.message).toContain("you are cleared for compartments alpha");
    }
  });

  test("the pod proxy's name:port and scheme:name:port forms name the pod", async () => {
    for (const name of ["b:8080", "http:b:80", "https:b:443", ":b:80"]) {
      const v = await review(req("proxy", name), deps());
      expect(v.message).toContain("Cannot proxy to pod in another compartment (UK-S-BRAVO)");
    }
    expect((await review(req("proxy", "a:8080"), deps())).allowed).toBe(true);
    for (const odd of [":8080", "ftp:a:80", "http::80", "a:b:c:d", ":a:b:c"])
      expect((await review(req("proxy", odd), deps())).allowed).toBe(false);
  });

  test("the override passes and is told apart", async () => {
    const v = await review(req("exec", "b", "olivia"), deps({ overrides: ["olivia"] }));
    expect(v).toMatchObject({ allowed: true, decision: "override" });
  });

  test("debug reads the stored pod the API server sends, not the cache", async () => {
    const stored = { metadata: { labels: { "svc.io/compartment": "UK-S-BRAVO" } } };
    const v = await review(req("ephemeralcontainers", "a", "alice", ALICE, { oldObject: stored }), deps());
    expect(v.allowed).toBe(false);
    expect(v.message).toContain("Cannot add a debug container to pod in another compartment (UK-S-BRAVO)");
  });

  test("the mls.svc.dev annotations are read too, for the parts they name", async () => {
    const note = await review(req("exec", "note-only"), deps({ unlabeled: "allow" }));
    expect(note.allowed).toBe(false);
    expect(note.message).toContain("another compartment (uk:bravo)");
    expect((await review(req("exec", "level-only"), deps())).allowed).toBe(true);
    expect((await review(req("exec", "odd-note"), deps())).message).toContain('mls.svc.dev/level="us:top"');
    // A label and an annotation that name two compartments: svc cannot tell which one holds.
    const mixed = await review(req("exec", "mixed"), deps());
    expect(mixed.allowed).toBe(false);
    expect(mixed.message).toContain("marks name two compartments (alpha, bravo)");
  });

  test("fields of the wrong type or size are refused, and not echoed at length", async () => {
    const huge = "x".repeat(100_000);
    for (const odd of [
      { ...req("exec", "a"), subResource: { toString: 1 } },
      { ...req("exec", "a"), namespace: ["alpha"] },
      { ...req("exec", "a"), name: 42 },
      { ...req("exec", "a"), subResource: huge },
    ]) {
      const v = await review(odd as unknown as AdmissionRequest, deps());
      expect(v.allowed).toBe(false);
      expect(v.message.length).toBeLessThan(400);
    }
    const v = await review(req("exec", "a", "alice", [...ALICE, 7 as unknown as string]), deps());
    expect(v.allowed).toBe(true);
  });

  test("unlabelled pods follow the configured rule", async () => {
    expect((await review(req("exec", "none"), deps())).allowed).toBe(false);
    expect(await review(req("exec", "none"), deps({ unlabeled: "allow" }))).toMatchObject({
      allowed: true,
      decision: "unlabeled",
    });
  });

  test("what it cannot tell it refuses: a missing pod, a malformed label, requests it was not made for", async () => {
    expect((await review(req("exec", "gone"), deps())).message).toContain("not found");
    expect((await review(req("exec", "bad"), deps())).message).toContain(
      "not <COUNTRY>-<SENSITIVITY>-<COMPARTMENT>",
    );
    for (const odd of [
      req("log", "a"),
      req("__proto__", "a"),
      req("exec", "a", "alice", ALICE, { operation: "UPDATE" }),
      req("exec", "a", "alice", ALICE, { resource: { group: "apps", resource: "pods" } }),
      req("exec", "", "alice"),
      req("exec", "a", "alice", ALICE, { namespace: "" }),
    ]) {
      const v = await review(odd as AdmissionRequest, deps());
      expect(v.allowed).toBe(false);
    }
  });

  test("a requester without groups is cleared for nothing", async () => {
    const v = await review(req("exec", "a", "mallory", [], { userInfo: { username: "mallory" } }), deps());
    expect(v.allowed).toBe(false);
    expect(v.message).toContain("compartments none");
  });
});
