import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { readLine } from "../../cmd/svc/line.ts";
import { partProblem } from "../../lib/config/schema.ts";
import { parseCompartmentLabel } from "../../lib/kube/clearance.ts";
import {
  changedMarks,
  foreignCompartments,
  markArguments,
  marksInPatch,
  marksOf,
  parsePatch,
} from "../../lib/kube/marks.ts";
import { PART_SYNTAX } from "../../lib/kube/mls.ts";
import { isNodeRef, podSelector, podTargets } from "../../lib/kube/pod-targets.ts";

const CUR = "US-TS-ALPHA";
const deployment = (label: string | undefined, template: string | undefined) => ({
  kind: "Deployment",
  metadata: { name: "d", labels: label ? { "svc.io/compartment": label } : {} },
  spec: { template: { metadata: { labels: template ? { "svc.io/compartment": template } : {} } } },
});

describe("compartment marks of objects", () => {
  test("the label and mls annotations of the object and of its pod templates", () => {
    const m = marksOf({
      metadata: {
        labels: { app: "x", "svc.io/compartment": "A" },
        annotations: { "mls.svc.dev/level": "us:ts" },
      },
      spec: { jobTemplate: { spec: { template: { metadata: { labels: { "svc.io/compartment": "B" } } } } } },
    });
    expect([...m]).toEqual([
      ["|label|svc.io/compartment", "A"],
      ["|annotation|mls.svc.dev/level", "us:ts"],
      ["spec.jobTemplate.spec.template|label|svc.io/compartment", "B"],
    ]);
  });

  test("another compartment on the object or only on its template is found; case does not matter", () => {
    expect(foreignCompartments(deployment("UK-S-BRAVO", undefined), CUR)).toEqual(["UK-S-BRAVO"]);
    expect(foreignCompartments(deployment("us-ts-alpha", "UK-S-BRAVO"), CUR)).toEqual(["UK-S-BRAVO"]);
    expect(foreignCompartments(deployment(undefined, undefined), CUR)).toEqual([]);
  });

  test("added, removed and changed marks are all changes", () => {
    const before = marksOf(deployment(CUR, CUR));
    expect(changedMarks(before, marksOf(deployment(CUR, CUR)))).toEqual([]);
    expect(changedMarks(before, marksOf(deployment(undefined, CUR)))).toEqual([
      "label svc.io/compartment: US-TS-ALPHA → (none)",
    ]);
    expect(changedMarks(before, marksOf(deployment(CUR, "UK-S-BRAVO")))[0]).toContain("pod template");
  });

  test("objects that are not objects have no marks", () => {
    for (const o of [null, undefined, "x", 3, [], { metadata: "x" }, { metadata: { labels: [] } }])
      expect(marksOf(o).size).toBe(0);
    expect(marksOf(JSON.parse('{"metadata":{"labels":{"__proto__":{"svc.io/compartment":"X"}}}}')).size).toBe(
      0,
    );
  });
});

describe("label and annotate arguments", () => {
  test.each([
    [["pod", "x", "svc.io/compartment=UK-S-BRAVO"], false, 1],
    [["pod", "x", "svc.io/compartment-"], false, 1],
    [["pod", "x", "svc.io/compartment="], false, 1],
    [["pod", "x", "app=svc.io/compartment"], false, 0],
    [["pod", "x", "svc.io/compartmentx=1"], false, 0],
    [["pod", "x", "mls.svc.dev/level=us:s"], true, 1],
    [["pod", "x", "mls.svc.dev/anything-"], true, 1],
    [["pod", "x", "svc.io/compartment=A"], true, 0],
  ])("%j (annotate: %p) names %p marks", (args, annotate, n) => {
    expect(markArguments(args, annotate)).toHaveLength(n);
  });
});

const touches = (type: string, text: string) => marksInPatch(type, parsePatch(text));

describe("patches", () => {
  test.each([
    ["merge", '{"metadata":{"labels":{"svc.io/compartment":"UK-S-BRAVO"}}}', true],
    ["merge", '{"metadata":{"labels":{"svc.io/compartment":null}}}', true],
    ["merge", '{"metadata":{"labels":null}}', true],
    ["merge", '{"metadata":null}', true],
    ["merge", '{"metadata":{"labels":{"app":"x"}}}', false],
    ["strategic", "metadata:\n  annotations:\n    mls.svc.dev/compartment: uk:bravo\n", true],
    ["strategic", '{"spec":{"template":{"metadata":{"labels":{"svc.io/compartment":"B"}}}}}', true],
    ["strategic", '{"metadata":{"labels":{"$patch":"replace","app":"x"}}}', true],
    ["strategic", '{"$patch":"delete"}', true],
    ["strategic", '{"spec":{"replicas":3}}', false],
    ["merge", '{"metadata":{"labels":{"svc.io\\u002fcompartment":"B"}}}', true],
    ["json", '[{"op":"replace","path":"/metadata/labels/svc.io~1compartment","value":"B"}]', true],
    ["json", '[{"op":"remove","path":"/metadata/labels"}]', true],
    ["json", '[{"op":"add","path":"/metadata/labels","value":{"app":"x"}}]', true],
    ["json", '[{"op":"replace","path":"","value":{}}]', true],
    [
      "json",
      '[{"op":"move","from":"/metadata/annotations/mls.svc.dev~1level","path":"/metadata/annotations/x"}]',
      true,
    ],
    ["json", '[{"op":"add","path":"/metadata/labels/app","value":"x"}]', false],
    ["json", '[{"op":"replace","path":"/spec/replicas","value":2}]', false],
    [
      "json",
      '[{"op":"add","path":"/spec/x","value":{"metadata":{"labels":{"svc.io/compartment":"B"}}}}]',
      true,
    ],
    ["json", '[{"op":"test","path":"/metadata/labels","value":{}}]', false],
  ])("%s %s touches the marks: %p", (type, patch, expected) => {
    expect(touches(type, patch).length > 0).toBe(expected);
  });

  test("a patch svc cannot read is refused with the reason", () => {
    // kubectl lets a merge written after a key override it; the YAML specification does not.
    expect(() => touches("strategic", "metadata:\n  annotations: &m {x: y}\n  labels: {<<: *m}")).toThrow(
      "svc does not accept YAML merge keys",
    );
    expect(touches("merge", '{"metadata":{"labels":{"<<":"x"}}}')).toEqual([]);
    expect(() => touches("merge", "{")).toThrow("--patch: not valid JSON or YAML");
    expect(() => touches("json", '{"op":"add"}')).toThrow("a JSON patch must be a list");
    expect(() => touches("apply", "{}")).toThrow('--type "apply": expected json, merge or strategic');
  });
});

describe("what pod commands reach", () => {
  const targets = (line: string) => podTargets(readLine(line.split(" ")));
  test("exec, attach and port-forward: the first argument, a pod unless TYPE/NAME", () => {
    expect(targets("exec -c app web-0 -- ls").refs).toEqual([{ ref: "pod/web-0" }]);
    expect(targets("-n alpha exec deploy/web -- ls").refs).toEqual([{ ref: "deploy/web" }]);
    expect(targets("attach -it pods/web-0").refs).toEqual([{ ref: "pods/web-0" }]);
    expect(targets("port-forward svc/web 8080:80").refs).toEqual([{ ref: "svc/web" }]);
    expect(targets("exec -f pod.yaml -- ls")).toMatchObject({ refs: [], files: ["pod.yaml"] });
  });
  test("cp: every pod side, with its own namespace", () => {
    expect(targets("cp other:/etc/passwd ./x").refs).toEqual([{ ref: "pod/other" }]);
    expect(targets("cp ./x bravo/other:/tmp/x").refs).toEqual([{ ref: "pod/other", namespace: "bravo" }]);
    expect(targets("cp ./a ./b").refs).toEqual([]);
    expect(() => targets("cp :/x ./b")).toThrow("expected a local path, POD:PATH or NAMESPACE/POD:PATH");
    expect(() => targets("cp a/b/c:/x ./b")).toThrow("NAMESPACE/POD:PATH");
  });
  test("debug: every argument before --; nodes are not looked up", () => {
    const t = targets("debug web-0 node/n1 -it --image=busybox -- sh");
    expect(t.refs).toEqual([{ ref: "pod/web-0" }, { ref: "node/n1" }]);
    expect(t.refs.map((r) => isNodeRef(r.ref))).toEqual([false, true]);
    expect(isNodeRef("nodes/n1")).toBe(true);
    expect(isNodeRef("nodesx/n1")).toBe(false);
  });
  test("no target, or -f - (standard input), is refused rather than guessed", () => {
    expect(() => targets("exec -it")).toThrow("a pod (NAME or TYPE/NAME) or -f FILE is required");
    expect(() => targets("exec -f - -- ls")).toThrow("svc cannot read the pod from standard input");
  });
  test("the pods behind an object: its selector as kubectl reads it", () => {
    expect(podSelector({ kind: "Service", spec: { selector: { app: "web" } } })).toBe("app=web");
    expect(
      podSelector({
        kind: "Deployment",
        spec: {
          selector: {
            matchLabels: { app: "web" },
            matchExpressions: [
              { key: "tier", operator: "In", values: ["a", "b"] },
              { key: "x", operator: "DoesNotExist" },
            ],
          },
        },
      }),
    ).toBe("app=web,tier in (a,b),!x");
    expect(podSelector({ kind: "Service", spec: {} })).toBeUndefined();
    expect(podSelector({ kind: "Deployment", spec: { selector: {} } })).toBeUndefined();
    expect(podSelector({ kind: "CronJob", spec: {} })).toBeUndefined();
  });
});

describe("one grammar of a compartment's parts: svc's configuration, its parsers and the cluster's policy", () => {
  const policy = readFileSync(join(import.meta.dir, "../../deploy/admission/base/policy.yaml"), "utf8");
  test("the policy's CEL spells each part as PART_SYNTAX does", () => {
    // The CEL writes the compartment's optional tail as a plain group, RE2 has no (?:…).
    const cel = (s: string) => s.replaceAll("(?:", "(");
    const { country, sensitivity, compartment } = PART_SYNTAX;
    expect(policy).toContain(`compartment=${cel(country)}-(${sensitivity})-${cel(compartment)}$`);
    expect(policy).toContain(`level=${cel(country)}:(${sensitivity})$`);
    expect(policy).toContain(`compartment=${cel(country)}:${cel(compartment)}$`);
  });
  test.each([
    ["RED-TEAM", true],
    ["a.b_c", true],
    ["X", true],
    ["x".repeat(56), true],
    ["x".repeat(57), false],
    ["-lead", false],
    ["trail.", false],
    ["sp ace", false],
    ["é", false],
  ])("compartment %p: configurable %p, and a label of it read back alike", (value, ok) => {
    expect(partProblem("compartment", value) === undefined).toBe(ok);
    if (ok) expect(parseCompartmentLabel(`US-TS-${value}`)?.compartment).toBe(value.toLowerCase());
    else if (value.length < 57) expect(parseCompartmentLabel(`US-TS-${value}`)).toBeUndefined();
  });
  test("sensitivities in one case, as the policy reads them", () => {
    for (const s of ["TS", "ts", "S", "u"]) expect(partProblem("sensitivity", s)).toBeUndefined();
    for (const s of ["Ts", "TOPSECRET", ""]) expect(partProblem("sensitivity", s)).toBeDefined();
  });
});
