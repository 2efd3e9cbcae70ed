import { describe, expect, test } from "bun:test";
import { isSvcError } from "../../lib/errors.ts";
import { injectMls } from "../../lib/kube/inject.ts";

const alpha = { country: "US", sensitivity: "TS", compartment: "ALPHA" };
const marks = {
  labels: { "svc.io/compartment": "US-TS-ALPHA" },
  annotations: { "mls.svc.dev/level": "us:ts", "mls.svc.dev/compartment": "us:alpha" },
};

describe("MLS injection (2.2)", () => {
  test("a Deployment: the object and its pod template, keeping existing labels and everything else", () => {
    const d = {
      apiVersion: "apps/v1",
      kind: "Deployment",
      metadata: { name: "web", labels: { app: "web" } },
      spec: {
        replicas: 2,
        template: { metadata: { labels: { app: "web" } }, spec: { containers: [{ name: "c", image: "i" }] } },
      },
    };
    injectMls(d, alpha);
    expect(d.metadata as object).toEqual({
      name: "web",
      labels: { app: "web", ...marks.labels },
      annotations: marks.annotations,
    });
    expect(d.spec.template.metadata as object).toEqual({
      labels: { app: "web", ...marks.labels },
      annotations: marks.annotations,
    });
    expect(d.spec.replicas).toBe(2);
    expect(d.spec.template.spec).toEqual({ containers: [{ name: "c", image: "i" }] });
  });

  test("a CronJob's template is under jobTemplate; a Pod has no template; a List is walked", () => {
    const cron = {
      kind: "CronJob",
      metadata: { name: "c" },
      spec: { jobTemplate: { spec: { template: { spec: {} } } } },
    };
    const list = { kind: "List", items: [cron, { kind: "Pod", metadata: { name: "p" }, spec: {} }] };
    injectMls(list, alpha);
    expect((cron.spec.jobTemplate.spec.template as { metadata?: unknown }).metadata).toEqual(marks);
    expect((list.items[1] as { metadata: unknown }).metadata).toEqual({ name: "p", ...marks });
  });

  test("an object labelled for another compartment is refused, naming it", () => {
    const pod = {
      kind: "Pod",
      metadata: { name: "p", namespace: "bravo", labels: { "svc.io/compartment": "UK-S-BRAVO" } },
    };
    try {
      injectMls(pod, alpha);
      throw new Error("expected a refusal");
    } catch (e) {
      expect(isSvcError(e)).toBe(true);
      expect((e as Error).message).toBe(
        "Pod bravo/p is labelled svc.io/compartment=UK-S-BRAVO, not the current compartment US-TS-ALPHA; switch context (svc context use) or remove the label",
      );
    }
    const mixed = {
      kind: "Deployment",
      metadata: { name: "d" },
      spec: { template: { metadata: { labels: { "svc.io/compartment": "X-Y-Z" } } } },
    };
    expect(() => injectMls(mixed, alpha)).toThrow("the pod template of Deployment d is labelled");
  });
});
