import { describe, expect, test } from "bun:test";
import { isSvcError } from "../../lib/errors.ts";
import { injectMls } from "../../lib/kube/inject.ts";

const alpha = { country: "US", sensitivity: "TS", compartment: "ALPHA" };
const marks = {
  labels: { "svc.io/compartment": "US-TS-ALPHA" },
  annotations: { "mls.svc.dev/level": "us:ts", "mls.svc.dev/compartment": "us:alpha" },
};

describe("MLS injection (docs/svc-config.md, svc apply)", () => {
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

  test("every selector the policy reads is pinned: PodDisruptionBudgets, claims, NetworkPolicies, custom kinds", () => {
    const pinned = { matchLabels: { app: "web", "svc.io/compartment": "US-TS-ALPHA" } };
    for (const kind of ["PodDisruptionBudget", "PersistentVolumeClaim", "Rollout"])
      expect(
        (
          injectMls(
            { kind, metadata: { name: "x" }, spec: { selector: { matchLabels: { app: "web" } } } },
            alpha,
          ) as {
            spec: { selector: unknown };
          }
        ).spec.selector,
      ).toEqual(pinned);
    const np = injectMls(
      {
        kind: "NetworkPolicy",
        metadata: { name: "x" },
        spec: { podSelector: {}, ingress: [{ from: [{ podSelector: { matchLabels: { app: "db" } } }] }] },
      },
      alpha,
    ) as { spec: { podSelector: unknown; ingress: unknown } };
    expect(np.spec.podSelector).toEqual({ matchLabels: { "svc.io/compartment": "US-TS-ALPHA" } });
    // Peers name the pods the policy admits: left as written.
    expect(np.spec.ingress).toEqual([{ from: [{ podSelector: { matchLabels: { app: "db" } } }] }]);
    // A selector that is not a label selector (a custom kind's string) is left alone.
    expect(
      (
        injectMls({ kind: "X", metadata: { name: "x" }, spec: { selector: "app == 'web'" } }, alpha) as {
          spec: { selector: unknown };
        }
      ).spec.selector,
    ).toBe("app == 'web'");
  });

  test("the templates of a PodTemplate and of a custom kind's spec.template are marked", () => {
    const pt = injectMls(
      { kind: "PodTemplate", metadata: { name: "x" }, template: { metadata: {} } },
      alpha,
    ) as {
      template: { metadata: { labels: Record<string, string> } };
    };
    expect(pt.template.metadata.labels["svc.io/compartment"]).toBe("US-TS-ALPHA");
    const bare = injectMls(
      { kind: "Composition", metadata: { name: "x" }, spec: { template: { x: 1 } } },
      alpha,
    ) as {
      spec: { template: unknown };
    };
    expect(bare.spec.template).toEqual({ x: 1 });
    const custom = injectMls(
      { kind: "Rollout", metadata: { name: "x" }, spec: { template: { metadata: {} } } },
      alpha,
    ) as {
      spec: { template: { metadata: { labels: Record<string, string> } } };
    };
    expect(custom.spec.template.metadata.labels["svc.io/compartment"]).toBe("US-TS-ALPHA");
  });

  test("selectors pin the compartment: workloads, a manual Job selector, a ReplicationController, a Service", () => {
    const sel = (kind: string, selector: unknown, extra: object = {}) =>
      injectMls({ kind, metadata: { name: "x" }, spec: { selector, ...extra } }, alpha) as {
        spec: { selector: Record<string, unknown> };
      };
    for (const kind of ["Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"])
      expect(sel(kind, { matchLabels: { app: "web" } }).spec.selector).toEqual({
        matchLabels: { app: "web", "svc.io/compartment": "US-TS-ALPHA" },
      });
    // Expressions are kept; the label is added beside them.
    expect(
      sel("Deployment", { matchExpressions: [{ key: "app", operator: "Exists" }] }).spec.selector,
    ).toEqual({
      matchExpressions: [{ key: "app", operator: "Exists" }],
      matchLabels: { "svc.io/compartment": "US-TS-ALPHA" },
    });
    expect(
      sel("Job", { matchLabels: { a: "b" } }, { manualSelector: true }).spec.selector.matchLabels,
    ).toEqual({
      a: "b",
      "svc.io/compartment": "US-TS-ALPHA",
    });
    // A generated Job selector is unique; none is added to a Job that leaves it to the API server.
    expect(sel("Job", { matchLabels: { a: "b" } }).spec.selector).toEqual({ matchLabels: { a: "b" } });
    expect(sel("Service", { app: "web" }).spec.selector).toEqual({
      app: "web",
      "svc.io/compartment": "US-TS-ALPHA",
    });
    expect(sel("ReplicationController", { app: "web" }).spec.selector).toEqual({
      app: "web",
      "svc.io/compartment": "US-TS-ALPHA",
    });
    // A Service without a selector selects nothing: it stays without one.
    expect(sel("Service", {}).spec.selector).toEqual({});
    const none = injectMls({ kind: "Service", metadata: { name: "s" }, spec: {} }, alpha) as { spec: object };
    expect(none.spec).toEqual({});
  });

  test("a selector that picks another compartment is refused, naming it", () => {
    expect(() =>
      injectMls(
        {
          kind: "Service",
          metadata: { name: "s" },
          spec: { selector: { "svc.io/compartment": "UK-S-BRAVO" } },
        },
        alpha,
      ),
    ).toThrow(
      "the selector of Service s picks svc.io/compartment=UK-S-BRAVO, not the current compartment US-TS-ALPHA",
    );
  });
});
