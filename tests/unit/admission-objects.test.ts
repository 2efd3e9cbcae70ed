import { describe, expect, test } from "bun:test";
import { compartmentOf } from "../../lib/kube/clearance.ts";
import type { Marks } from "../../lib/kube/mls.ts";
import { priorityClassHarmless } from "../../lib/kube/object-references.ts";
import { podSpecOf, referencesOf } from "../../lib/kube/pod-references.ts";
import type { Lookup } from "../../proxy/admission/consistency.ts";
import { type AdmissionRequest, type ReviewDeps, review } from "../../proxy/admission/review.ts";

/**
 * The webhook's decisions beyond requests into pods (docs/admission.md): bindings, evictions, scale and tokens by
 * the requester's clearances; references and owners by the object's own compartment.
 */
const ALICE = ["svc:country:us", "svc:sensitivity:ts", "svc:compartment:alpha"];
const ALPHA = "US-TS-ALPHA";
const BRAVO = "UK-S-BRAVO";
const m = (compartment?: string, level?: string, compartmentNote?: string): Marks => ({
  compartment,
  level,
  compartmentNote,
});
const labels = (c?: string) => (c ? { labels: { "svc.io/compartment": c } } : {});

/** Objects by "kind/name" in namespace shared. */
const objects: Record<string, Marks> = {
  "pods/p-alpha": m(ALPHA),
  "pods/p-bravo": m(BRAVO),
  "pods/p-none": m(),
  "serviceaccounts/sa-alpha": m(ALPHA),
  "serviceaccounts/sa-bravo": m(BRAVO),
  "serviceaccounts/default": m(),
  "secrets/s-alpha": m(ALPHA),
  "secrets/s-bravo": m(BRAVO),
  "secrets/s-bad": m("BRAVO"),
  "configmaps/cm-bravo": m(undefined, undefined, "uk:bravo"),
  "configmaps/kube-root-ca.crt": m(),
  "persistentvolumeclaims/data-bravo": m(BRAVO),
  "deployments/d-bravo": m(BRAVO),
  "services/svc-alpha": m(ALPHA),
  "services/svc-bravo": m(BRAVO),
};
const owners: Record<string, Lookup> = {
  "rs-alpha": { found: "yes", marks: m(ALPHA), what: "ReplicaSet shared/rs-alpha" },
  "rs-bravo": { found: "yes", marks: m(BRAVO), what: "ReplicaSet shared/rs-bravo" },
  "rs-none": { found: "yes", marks: m(), what: "ReplicaSet shared/rs-none" },
};
/** What HPAs, Ingresses, claims, Events and pods name, by "group/Kind/name". */
const found = (marks: Marks, what: string, harmless?: string): Lookup => ({
  found: "yes",
  marks,
  what,
  ...(harmless ? { harmless } : {}),
});
const named: Record<string, Lookup> = {
  "apps/Deployment/d-alpha": found(m(ALPHA), "Deployment shared/d-alpha"),
  "apps/Deployment/d-bravo": found(m(BRAVO), "Deployment shared/d-bravo"),
  "/Service/svc-alpha": found(m(ALPHA), "Service shared/svc-alpha"),
  "/Service/svc-bravo": found(m(BRAVO), "Service shared/svc-bravo"),
  "/Secret/s-bravo": found(m(BRAVO), "Secret shared/s-bravo"),
  "/PersistentVolume/pv-alpha": found(m(ALPHA), "PersistentVolume pv-alpha"),
  "/PersistentVolume/pv-bravo": found(m(BRAVO), "PersistentVolume pv-bravo"),
  "/PersistentVolume/pv-none": found(m(), "PersistentVolume pv-none"),
  "/Secret/s-alpha": found(m(ALPHA), "Secret shared/s-alpha"),
  "/PersistentVolumeClaim/data-alpha": found(m(ALPHA), "PersistentVolumeClaim shared/data-alpha"),
  "/PersistentVolumeClaim/data-bravo": found(m(BRAVO), "PersistentVolumeClaim shared/data-bravo"),
  "/Pod/p-bravo": found(m(BRAVO), "Pod shared/p-bravo"),
  "scheduling.k8s.io/PriorityClass/high": found(m(), "PriorityClass high"),
  "scheduling.k8s.io/PriorityClass/queue": found(m(), "PriorityClass queue", "never preempts"),
  "scheduling.k8s.io/PriorityClass/alpha-high": found(m(ALPHA), "PriorityClass alpha-high"),
  "/ServiceAccount/sa-alpha": found(m(ALPHA), "ServiceAccount shared/sa-alpha"),
  "/ServiceAccount/sa-bravo": found(m(BRAVO), "ServiceAccount shared/sa-bravo"),
};

const deps = (
  o: { unlabeled?: "allow" | "deny"; overrides?: string[] } = {},
): ReviewDeps & {
  asked: string[];
} => {
  const asked: string[] = [];
  return {
    asked,
    targetMarks: async (kind, _ns, name) => {
      const found = objects[`${kind}/${name}`];
      return found ? [found, ...(kind === "deployments" ? [m(BRAVO)] : [])] : null;
    },
    // Every object's UID is "uid-" and its name.
    entry: async (kind, _ns, name) => {
      asked.push(`${kind}/${name}`);
      const found = objects[`${kind}/${name}`];
      return found ? { ...found, uid: `uid-${name}` } : null;
    },
    lookup: async (ref) => {
      asked.push(`lookup ${ref.kind}/${ref.name}`);
      // The webhook reads these kinds (proxy/admission/start.ts); any other is unknown to it.
      const readable = [
        "ReplicaSet",
        "Deployment",
        "Service",
        "Secret",
        "Pod",
        "PriorityClass",
        "ServiceAccount",
      ];
      if (!readable.includes(ref.kind) && !ref.kind.startsWith("PersistentVolume"))
        return { found: "unknown-kind" };
      const key = `${ref.group}/${ref.kind}/${ref.name}`;
      return Object.hasOwn(named, key) ? (named[key] as Lookup) : (owners[ref.name] ?? { found: "no" });
    },
    bindingsOf: async (_ns, account) =>
      account === "taken" ? [{ marks: m(BRAVO), what: "RoleBinding shared/bravo-admins" }] : [],
    canOverride: async (u) => (o.overrides ?? []).includes(u.username ?? ""),
    unlabeled: o.unlabeled ?? "deny",
  };
};

const user = (username = "alice", groups = ALICE) => ({ userInfo: { username, groups } });

const access = (
  resource: string,
  subResource: string | undefined,
  operation: string,
  name: string,
  group = "",
  who = user(),
): AdmissionRequest => ({
  uid: "u",
  resource: { group, version: "v1", resource },
  ...(subResource ? { subResource } : {}),
  namespace: "shared",
  name,
  operation,
  ...who,
});

describe("a token bound to a pod speaks for that pod: requesting one needs clearance for the pod", () => {
  const tokenFor = (account: string, boundObjectRef: unknown) => ({
    ...access("serviceaccounts", "token", "CREATE", account),
    object: { kind: "TokenRequest", spec: { audiences: [], boundObjectRef } },
  });
  test("an unmarked account's token bound to another compartment's pod is refused", async () => {
    for (const [r, text] of [
      [
        tokenFor("default", { kind: "Pod", apiVersion: "v1", name: "p-bravo", uid: "uid-p-bravo" }),
        "Cannot request a token of service account shared/default bound to pod in another compartment (UK-S-BRAVO)",
      ],
      [
        tokenFor("default", { kind: "Pod", apiVersion: "v1", name: "p-bravo" }),
        "bound to pod in another compartment",
      ],
      [
        tokenFor("default", { kind: "Pod", apiVersion: "v1", name: "p-alpha", uid: "uid-other" }),
        "the pod a token for service account shared/default would be bound to does not exist",
      ],
      [tokenFor("default", { kind: "Pod", name: "p-gone" }), "would be bound to does not exist"],
      [tokenFor("default", { kind: "Pod", name: ["p-alpha"] }), "would be bound to does not exist"],
      // Decided by default: a kind svc cannot tell is refused, whatever its spelling.
      [tokenFor("default", { kind: "pod", name: "p-alpha" }), 'bound to "pod": svc cannot tell'],
      [tokenFor("default", { kind: "Deployment", name: "d-bravo" }), 'bound to "Deployment"'],
      [tokenFor("default", { kind: ["Pod"], name: "p-alpha" }), "bound to (a list)"],
    ] as const) {
      const v = await review(r, deps());
      expect({ r: r.object, allowed: v.allowed }).toEqual({ r: r.object, allowed: false });
      expect(v.message).toContain(text);
    }
  });
  test("one bound to a pod of one's own compartment, or to no pod, is decided by the account", async () => {
    const own = tokenFor("default", { kind: "Pod", name: "p-alpha", uid: "uid-p-alpha" });
    expect((await review(own, deps())).message).toBe("cleared for US-TS-ALPHA");
    expect(
      (await review(tokenFor("default", { kind: "Secret", name: "s-bravo" }), deps({ unlabeled: "allow" })))
        .allowed,
    ).toBe(true);
    expect(
      (await review(tokenFor("default", { kind: "Node", name: "kwok-node-0" }), deps({ unlabeled: "allow" })))
        .allowed,
    ).toBe(true);
    expect((await review(tokenFor("sa-bravo", { kind: "Pod", name: "p-alpha" }), deps())).allowed).toBe(
      false,
    );
  });
});

describe("bindings, evictions, scale and tokens are decided by the requester's clearances", () => {
  test("another compartment's target is refused, naming its compartment and the requester's", async () => {
    for (const [r, text] of [
      [access("pods", "binding", "CREATE", "p-bravo"), "Cannot bind pod in another compartment (UK-S-BRAVO)"],
      [
        access("bindings", undefined, "CREATE", "p-bravo"),
        "Cannot bind pod in another compartment (UK-S-BRAVO)",
      ],
      [
        access("pods", "eviction", "CREATE", "p-bravo"),
        "Cannot evict pod in another compartment (UK-S-BRAVO)",
      ],
      [
        access("deployments", "scale", "UPDATE", "d-bravo", "apps"),
        "Cannot scale Deployment in another compartment (UK-S-BRAVO)",
      ],
      [
        access("serviceaccounts", "token", "CREATE", "sa-bravo"),
        "Cannot request a token for service account in another compartment (UK-S-BRAVO)",
      ],
    ] as const) {
      const v = await review(r, deps());
      expect(v.allowed).toBe(false);
      expect(v.message).toContain(text);
      expect(v.message).toContain("you are cleared for compartments alpha");
    }
  });

  test("one's own compartment passes; unlabelled targets follow unlabeled_pods; the override passes", async () => {
    expect((await review(access("pods", "binding", "CREATE", "p-alpha"), deps())).allowed).toBe(true);
    expect((await review(access("serviceaccounts", "token", "CREATE", "sa-alpha"), deps())).allowed).toBe(
      true,
    );
    expect((await review(access("pods", "eviction", "CREATE", "p-none"), deps())).allowed).toBe(false);
    expect(
      (await review(access("pods", "eviction", "CREATE", "p-none"), deps({ unlabeled: "allow" }))).allowed,
    ).toBe(true);
    const forced = await review(
      access("pods", "binding", "CREATE", "p-bravo"),
      deps({ overrides: ["alice"] }),
    );
    expect(forced).toMatchObject({ allowed: true, decision: "override" });
  });

  test("the service proxy is decided by the Service's marks, in each form of its name", async () => {
    for (const name of ["svc-bravo", "svc-bravo:80", "https:svc-bravo:443"]) {
      const v = await review(access("services", "proxy", "CONNECT", name), deps());
      expect(v.allowed).toBe(false);
      expect(v.message).toContain("Cannot proxy to service in another compartment (UK-S-BRAVO)");
    }
    expect((await review(access("services", "proxy", "CONNECT", "svc-alpha:80"), deps())).allowed).toBe(true);
  });

  test("a subresource or CONNECT the webhook was not written for is refused by default; the override passes", async () => {
    for (const r of [
      access("pods", "resize", "UPDATE", "p-alpha"),
      access("widgets", "scale", "UPDATE", "w", "example.com"),
      access("widgets", "connect", "CONNECT", "w", "example.com"),
      access("nodes", "proxy", "CONNECT", "n"),
    ]) {
      const v = await review(r, deps());
      expect(v.allowed).toBe(false);
      expect(v.message).toContain("cannot tell whose objects anything else reaches");
      expect((await review({ ...r, ...user("olivia") }, deps({ overrides: ["olivia"] }))).decision).toBe(
        "override",
      );
    }
  });

  test("wrong operations, groups and unknown targets are refused", async () => {
    for (const r of [
      access("pods", "binding", "UPDATE", "p-alpha"),
      access("deployments", "scale", "UPDATE", "d-bravo", ""),
      access("daemonsets", "scale", "UPDATE", "x", "apps"),
      access("pods", "binding", "CREATE", "gone"),
      access("__proto__", "scale", "UPDATE", "x", "apps"),
    ])
      expect((await review(r, deps())).allowed).toBe(false);
  });
});

const pod = (name: string, compartment: string | undefined, spec: Record<string, unknown>, extra = {}) => ({
  uid: "u",
  kind: { group: "", version: "v1", kind: "Pod" },
  resource: { group: "", version: "v1", resource: "pods" },
  namespace: "shared",
  name,
  operation: "CREATE",
  ...user(),
  object: { metadata: { name, ...labels(compartment) }, spec },
  ...extra,
});

describe("references: a pod or template names only objects of its own compartment", () => {
  test("a pod of ALPHA naming BRAVO's Secret, ConfigMap, ServiceAccount or claim is refused, naming both", async () => {
    for (const spec of [
      { serviceAccountName: "sa-bravo" },
      { volumes: [{ name: "v", secret: { secretName: "s-bravo" } }] },
      { volumes: [{ name: "v", configMap: { name: "cm-bravo" } }] },
      { volumes: [{ name: "v", persistentVolumeClaim: { claimName: "data-bravo" } }] },
      { volumes: [{ name: "v", projected: { sources: [{ secret: { name: "s-bravo" } }] } }] },
      { volumes: [{ name: "v", csi: { driver: "x", nodePublishSecretRef: { name: "s-bravo" } } }] },
      { imagePullSecrets: [{ name: "s-bravo" }] },
      {
        containers: [
          { name: "c", env: [{ name: "E", valueFrom: { secretKeyRef: { name: "s-bravo", key: "k" } } }] },
        ],
      },
      { initContainers: [{ name: "c", envFrom: [{ configMapRef: { name: "cm-bravo" } }] }] },
      { ephemeralContainers: [{ name: "c", envFrom: [{ secretRef: { name: "s-bravo" } }] }] },
    ]) {
      const v = await review(pod("p", ALPHA, spec) as AdmissionRequest, deps());
      expect(v.allowed).toBe(false);
      expect(v.message).toContain("Pod shared/p (US-TS-ALPHA) names");
      expect(v.message).toMatch(/of another compartment \((UK-S-BRAVO|uk:bravo)\)/);
    }
  });

  test("its own compartment's objects, unmarked ones (the default account, kube-root-ca.crt) and missing ones pass", async () => {
    const spec = {
      volumes: [
        { name: "a", secret: { secretName: "s-alpha" } },
        {
          name: "b",
          projected: { sources: [{ configMap: { name: "kube-root-ca.crt" } }, { serviceAccountToken: {} }] },
        },
        { name: "c", secret: { secretName: "not-created-yet" } },
      ],
    };
    const d = deps();
    expect((await review(pod("p", ALPHA, spec) as AdmissionRequest, d)).allowed).toBe(true);
    expect(d.asked.sort()).toEqual([
      "configmaps/kube-root-ca.crt",
      "secrets/not-created-yet",
      "secrets/s-alpha",
      "serviceaccounts/default",
    ]);
  });

  test("an unmarked pod naming a marked object follows unlabeled_pods; unreadable marks are refused", async () => {
    const spec = { volumes: [{ name: "v", secret: { secretName: "s-bravo" } }] };
    const denied = await review(pod("p", undefined, spec) as AdmissionRequest, deps());
    expect(denied).toMatchObject({ allowed: false, decision: "unlabeled" });
    expect(denied.message).toContain("of compartment UK-S-BRAVO");
    expect(
      (await review(pod("p", undefined, spec) as AdmissionRequest, deps({ unlabeled: "allow" }))).allowed,
    ).toBe(true);
    const bad = await review(
      pod("p", ALPHA, { volumes: [{ name: "v", secret: { secretName: "s-bad" } }] }) as AdmissionRequest,
      deps({ unlabeled: "allow" }),
    );
    expect(bad.allowed).toBe(false);
    expect(bad.message).toContain("cannot read");
  });

  test("templates of every workload kind are read; the override passes", async () => {
    const template = { metadata: labels(ALPHA), spec: { serviceAccountName: "sa-bravo" } };
    for (const [resource, object] of [
      ["deployments", { metadata: { name: "w" }, spec: { template } }],
      ["statefulsets", { metadata: { name: "w" }, spec: { template } }],
      ["jobs", { metadata: { name: "w" }, spec: { template } }],
      ["replicationcontrollers", { metadata: { name: "w" }, spec: { template } }],
      ["podtemplates", { metadata: { name: "w" }, template }],
      ["cronjobs", { metadata: { name: "w" }, spec: { jobTemplate: { spec: { template } } } }],
    ] as const) {
      const r = { ...access(resource, undefined, "CREATE", "w"), object } as AdmissionRequest;
      expect((await review(r, deps())).message).toContain(
        "names ServiceAccount shared/sa-bravo of another compartment",
      );
      expect((await review(r, deps({ overrides: ["alice"] }))).decision).toBe("override");
    }
  });

  test("a service-account token Secret is only for an account of its own compartment", async () => {
    const secret = (c: string, sa: string) =>
      ({
        ...access("secrets", undefined, "CREATE", "tok"),
        object: {
          metadata: { name: "tok", ...labels(c), annotations: { "kubernetes.io/service-account.name": sa } },
          type: "kubernetes.io/service-account-token",
        },
      }) as AdmissionRequest;
    expect((await review(secret(ALPHA, "sa-bravo"), deps())).message).toContain(
      "names ServiceAccount shared/sa-bravo of another compartment (UK-S-BRAVO)",
    );
    expect((await review(secret(ALPHA, "sa-alpha"), deps())).allowed).toBe(true);
  });

  test("odd shapes are read safely: __proto__ names, non-string names, huge lists are bounded", async () => {
    const refs = referencesOf({
      serviceAccountName: 7,
      volumes: [JSON.parse('{"name":"v","__proto__":{"secretName":"s-bravo"}}'), null, "x"],
      containers: { length: 5 },
    });
    expect(refs.map((r) => `${r.kind}/${r.name}`)).toEqual(["serviceaccounts/default", "secrets/s-bravo"]);
    const many = {
      volumes: Array.from({ length: 300 }, (_, i) => ({ name: `v${i}`, secret: { secretName: `s${i}` } })),
    };
    const v = await review(pod("p", ALPHA, many) as AdmissionRequest, deps());
    expect(v.allowed).toBe(false);
    expect(v.message).toContain("at most 256 are decided");
    expect(podSpecOf("__proto__", {})).toBeUndefined();
  });
});

describe("owners: an object is owned only by an owner of its compartment", () => {
  const owned = (c: string | undefined, owner: string, kind = "ReplicaSet", extra = {}) =>
    ({
      ...pod("p", c, {}),
      operation: "UPDATE",
      oldObject: { metadata: { name: "p" } },
      object: {
        metadata: {
          name: "p",
          ...labels(c),
          ownerReferences: [
            { apiVersion: "apps/v1", kind, name: owner, uid: `uid-${owner}`, controller: true },
          ],
        },
        spec: {},
      },
      ...extra,
    }) as AdmissionRequest;

  test("adoption across compartments is refused, whoever asks, the controllers included", async () => {
    const controller = user("system:serviceaccount:kube-system:replicaset-controller", []);
    for (const [c, owner] of [
      [ALPHA, "rs-bravo"],
      [undefined, "rs-bravo"],
      [BRAVO, "rs-none"],
    ] as const) {
      const v = await review(owned(c, owner, "ReplicaSet", controller), deps());
      expect(v.allowed).toBe(false);
      expect(v.message).toContain("cannot be owned by ReplicaSet shared/");
      expect(v.message).toContain("of another compartment");
    }
  });

  test("the same compartment (or both unmarked) passes; an owner that does not exist passes", async () => {
    expect((await review(owned(ALPHA, "rs-alpha"), deps())).allowed).toBe(true);
    expect((await review(owned(undefined, "rs-none"), deps())).allowed).toBe(true);
    expect((await review(owned(ALPHA, "gone"), deps())).allowed).toBe(true);
  });

  test("an owner of a kind svc cannot read is refused, marked object or not; the override passes", async () => {
    for (const c of [ALPHA, undefined]) {
      const v = await review(owned(c, "r", "Rollout"), deps());
      expect(v.allowed).toBe(false);
      expect(v.message).toContain("svc cannot tell the compartment of a Rollout (apps/v1)");
    }
    const o = await review(owned(ALPHA, "r", "Rollout", user("olivia")), deps({ overrides: ["olivia"] }));
    expect(o).toMatchObject({ allowed: true, decision: "override" });
  });

  test("an owner already there is not looked up again; a controller's own creation is not looked up", async () => {
    const d = deps();
    const r = owned(ALPHA, "rs-bravo");
    const kept = { ...r, oldObject: r.object } as AdmissionRequest;
    expect((await review(kept, d)).allowed).toBe(true);
    const created = {
      ...r,
      operation: "CREATE",
      oldObject: null,
      ...user("system:kube-controller-manager", []),
    };
    expect((await review(created as AdmissionRequest, d)).allowed).toBe(true);
    expect(d.asked.filter((a) => a.startsWith("lookup"))).toEqual([]);
  });
});

describe("an object's marks read as one compartment", () => {
  test("marks that disagree, or that are malformed, cannot be read", () => {
    expect(compartmentOf(m(ALPHA, "us:ts", "us:alpha"))).toMatchObject({ kind: "marked", shown: ALPHA });
    expect(compartmentOf(m(ALPHA, "uk:ts"))).toMatchObject({ kind: "unreadable" });
    expect(compartmentOf(m(ALPHA, undefined, "us:bravo"))).toMatchObject({ kind: "unreadable" });
    expect(compartmentOf(m("ALPHA"))).toMatchObject({ kind: "unreadable" });
    expect(compartmentOf(m())).toEqual({ kind: "none" });
    expect(compartmentOf(m(undefined, "us:ts"))).toMatchObject({ kind: "marked", shown: "us:ts" });
  });
});

describe("what an object names for a controller: the same compartment, existing, of a kind svc reads", () => {
  const object = (
    group: string,
    resource: string,
    kind: string,
    c: string | undefined,
    body: Record<string, unknown>,
    who = user(),
  ) =>
    ({
      uid: "u",
      kind: { group, version: "v1", kind },
      resource: { group, version: "v1", resource },
      namespace: "shared",
      name: "x",
      operation: "CREATE",
      object: { metadata: { name: "x", ...labels(c) }, ...body },
      ...who,
    }) as AdmissionRequest;
  const hpa = (c: string | undefined, target: Record<string, unknown>, who = user()) =>
    object(
      "autoscaling",
      "horizontalpodautoscalers",
      "HorizontalPodAutoscaler",
      c,
      {
        spec: { scaleTargetRef: target, maxReplicas: 3 },
      },
      who,
    );
  const ingress = (c: string, service: string, tls?: string) =>
    object("networking.k8s.io", "ingresses", "Ingress", c, {
      spec: {
        rules: [{ http: { paths: [{ path: "/", backend: { service: { name: service } } }] } }],
        ...(tls ? { tls: [{ secretName: tls }] } : {}),
      },
    });
  const claim = (c: string, spec: Record<string, unknown>, who = user()) =>
    object("", "persistentvolumeclaims", "PersistentVolumeClaim", c, { spec }, who);

  test("an HPA scaling another compartment's workload is refused; its own passes", async () => {
    const v = await review(
      hpa(ALPHA, { apiVersion: "apps/v1", kind: "Deployment", name: "d-bravo" }),
      deps(),
    );
    expect(v.allowed).toBe(false);
    expect(v.message).toContain(
      "HorizontalPodAutoscaler shared/x (US-TS-ALPHA) names Deployment shared/d-bravo of another compartment (UK-S-BRAVO) (spec.scaleTargetRef)",
    );
    expect(
      (await review(hpa(ALPHA, { apiVersion: "apps/v1", kind: "Deployment", name: "d-alpha" }), deps()))
        .allowed,
    ).toBe(true);
  });

  test("a target that does not exist, or of a kind svc cannot read, is refused: it cannot be told", async () => {
    const gone = await review(
      hpa(ALPHA, { apiVersion: "apps/v1", kind: "Deployment", name: "later" }),
      deps(),
    );
    expect(gone.allowed).toBe(false);
    expect(gone.message).toContain("which does not exist: svc cannot tell its compartment; create it first");
    const custom = await review(
      hpa(ALPHA, { apiVersion: "argoproj.io/v1alpha1", kind: "Rollout", name: "r" }),
      deps(),
    );
    expect(custom.allowed).toBe(false);
    expect(custom.message).toContain("svc cannot tell the compartment of a Rollout");
    // A reference whose kind is not text names nothing svc can read.
    const odd = await review(hpa(ALPHA, { apiVersion: "apps/v1", kind: { x: 1 }, name: "d-alpha" }), deps());
    expect(odd.allowed).toBe(false);
  });

  test("an Ingress routing to another compartment's Service or serving its TLS Secret is refused", async () => {
    expect((await review(ingress(ALPHA, "svc-bravo"), deps())).message).toContain(
      "names Service shared/svc-bravo of another compartment (UK-S-BRAVO) (spec.rules[0] backend)",
    );
    expect((await review(ingress(ALPHA, "svc-alpha", "s-bravo"), deps())).message).toContain(
      "names Secret shared/s-bravo of another compartment (UK-S-BRAVO) (spec.tls secretName)",
    );
    expect((await review(ingress(ALPHA, "svc-alpha"), deps())).allowed).toBe(true);
  });

  test("a claim binding another compartment's volume, an unmarked one, or cloning its claim is refused", async () => {
    for (const [spec, text] of [
      [{ volumeName: "pv-bravo" }, "PersistentVolume pv-bravo of another compartment (UK-S-BRAVO)"],
      [{ volumeName: "pv-none" }, "PersistentVolume pv-none of another compartment (no compartment)"],
      [
        { dataSource: { kind: "PersistentVolumeClaim", name: "data-bravo" } },
        "PersistentVolumeClaim shared/data-bravo of another compartment (UK-S-BRAVO) (spec.dataSource)",
      ],
      [
        { dataSourceRef: { apiGroup: "snapshot.storage.k8s.io", kind: "VolumeSnapshot", name: "s" } },
        "svc cannot tell the compartment of a VolumeSnapshot",
      ],
    ] as const) {
      const v = await review(claim(ALPHA, spec), deps());
      expect(v.allowed).toBe(false);
      expect(v.message).toContain(text);
    }
    expect((await review(claim(ALPHA, { volumeName: "pv-alpha" }), deps())).allowed).toBe(true);
    expect(
      (
        await review(
          claim(ALPHA, { dataSource: { kind: "PersistentVolumeClaim", name: "data-alpha" } }),
          deps(),
        )
      ).allowed,
    ).toBe(true);
  });

  test("the binder setting a claim's volume is not looked up: the control plane copies what users wrote", async () => {
    const d = deps();
    const binder = user("system:serviceaccount:kube-system:persistent-volume-binder", []);
    expect((await review(claim(ALPHA, { volumeName: "pv-none" }, binder), d)).allowed).toBe(true);
    expect(d.asked.filter((a) => a.startsWith("lookup"))).toEqual([]);
  });

  test("an Event about another compartment's pod is refused", async () => {
    const v = await review(
      object("", "events", "Event", ALPHA, {
        involvedObject: { apiVersion: "v1", kind: "Pod", name: "p-bravo", namespace: "shared" },
      }),
      deps(),
    );
    expect(v.allowed).toBe(false);
    expect(v.message).toContain(
      "names Pod shared/p-bravo of another compartment (UK-S-BRAVO) (involvedObject)",
    );
  });

  test("a priority class harms no compartment when it never preempts or is the cluster's default", () => {
    expect(priorityClassHarmless({ preemptionPolicy: "Never", value: 1000 })).toBe("never preempts");
    expect(priorityClassHarmless({ globalDefault: true })).toBe("the cluster's default");
    expect(priorityClassHarmless({ preemptionPolicy: "PreemptLowerPriority" })).toBeUndefined();
    expect(priorityClassHarmless({ globalDefault: "true", preemptionPolicy: "never" })).toBeUndefined();
    expect(priorityClassHarmless(null)).toBeUndefined();
  });

  test("a pod may name a preempting priority class only of its compartment; one that never preempts passes", async () => {
    const withClass = (cls: string) =>
      ({
        ...pod("p", ALPHA, { priorityClassName: cls, serviceAccountName: "default" }),
      }) as AdmissionRequest;
    const high = await review(withClass("high"), deps());
    expect(high.allowed).toBe(false);
    expect(high.message).toContain(
      "names PriorityClass high of another compartment (no compartment) (priorityClassName)",
    );
    expect((await review(withClass("queue"), deps())).allowed).toBe(true);
    expect((await review(withClass("alpha-high"), deps())).allowed).toBe(true);
    expect((await review(withClass("missing"), deps())).allowed).toBe(false);
  });

  test("a RoleBinding may grant its role only to its own compartment's service accounts", async () => {
    const binding = (account: string) =>
      object("rbac.authorization.k8s.io", "rolebindings", "RoleBinding", ALPHA, {
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "edit" },
        subjects: [{ kind: "ServiceAccount", name: account, namespace: "shared" }],
      });
    const v = await review(binding("sa-bravo"), deps());
    expect(v.allowed).toBe(false);
    expect(v.message).toContain(
      "names ServiceAccount shared/sa-bravo of another compartment (UK-S-BRAVO) (subjects)",
    );
    expect((await review(binding("sa-alpha"), deps())).allowed).toBe(true);
  });

  test("a new service account cannot take over the bindings another compartment's account of its name had", async () => {
    const account = (name: string) =>
      ({
        ...object("", "serviceaccounts", "ServiceAccount", ALPHA, {}),
        name,
        object: { metadata: { name, ...labels(ALPHA) } },
      }) as AdmissionRequest;
    const taken = await review(account("taken"), deps());
    expect(taken.allowed).toBe(false);
    expect(taken.message).toContain(
      "would take the role that RoleBinding shared/bravo-admins of another compartment (UK-S-BRAVO) grants to its name",
    );
    expect((await review(account("fresh"), deps())).allowed).toBe(true);
  });

  test("claim templates are decided as the claims they become: their sources and selectors", async () => {
    const set = (template: Record<string, unknown>) =>
      object("apps", "statefulsets", "StatefulSet", ALPHA, {
        spec: {
          template: { metadata: labels(ALPHA), spec: { serviceAccountName: "sa-alpha" } },
          volumeClaimTemplates: [{ metadata: { name: "data" }, spec: template }],
        },
      });
    const clone = await review(
      set({ dataSource: { kind: "PersistentVolumeClaim", name: "data-bravo" } }),
      deps(),
    );
    expect(clone.allowed).toBe(false);
    expect(clone.message).toContain(
      "names PersistentVolumeClaim shared/data-bravo of another compartment (UK-S-BRAVO) (spec.volumeClaimTemplates[0] spec.dataSource)",
    );
    const unpinned = await review(set({ selector: { matchLabels: { tier: "db" } } }), deps());
    expect(unpinned.message).toContain("whose selector does not pin svc.io/compartment=US-TS-ALPHA");
    expect(
      (await review(set({ selector: { matchLabels: { "svc.io/compartment": ALPHA } } }), deps())).allowed,
    ).toBe(true);
    const ephemeral = await review(
      pod("p", ALPHA, {
        serviceAccountName: "sa-alpha",
        volumes: [
          { name: "scratch", ephemeral: { volumeClaimTemplate: { spec: { volumeName: "pv-bravo" } } } },
        ],
      }) as AdmissionRequest,
      deps(),
    );
    expect(ephemeral.message).toContain('(volume "scratch" spec.volumeName)');
  });

  test("an update is decided by what it names anew: a claim's volume set by the binder stays", async () => {
    const claimOf = (volumeName: string) => ({
      metadata: { name: "x", ...labels(ALPHA) },
      spec: { volumeName },
    });
    const update = {
      ...claim(ALPHA, {}),
      operation: "UPDATE",
      object: {
        ...claimOf("pv-none"),
        metadata: { name: "x", labels: { "svc.io/compartment": ALPHA, tier: "db" } },
      },
      oldObject: claimOf("pv-none"),
    } as AdmissionRequest;
    expect((await review(update, deps())).allowed).toBe(true);
    const moved = { ...update, object: claimOf("pv-bravo") } as AdmissionRequest;
    expect((await review(moved, deps())).allowed).toBe(false);
  });

  test("RoleBinding subjects: an account without a namespace is the binding's, a User may name an account", async () => {
    for (const subject of [
      { kind: "ServiceAccount", name: "sa-bravo" },
      { kind: "User", name: "system:serviceaccount:shared:sa-bravo" },
    ]) {
      const v = await review(
        object("rbac.authorization.k8s.io", "rolebindings", "RoleBinding", ALPHA, {
          roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "edit" },
          subjects: [subject],
        }),
        deps(),
      );
      expect({ subject, allowed: v.allowed }).toEqual({ subject, allowed: false });
      expect(v.message).toContain("names ServiceAccount shared/sa-bravo of another compartment (UK-S-BRAVO)");
    }
  });

  test("a pod may mount only storage the marks can tell: inline NFS, iSCSI, RBD or host paths are refused", async () => {
    for (const volume of [
      { name: "v", nfs: { server: "10.0.0.5", path: "/exports/bravo" } },
      { name: "v", iscsi: { targetPortal: "10.0.0.6:3260", iqn: "iqn.x", lun: 0 } },
      { name: "v", rbd: { monitors: ["10.0.0.7"], image: "bravo" } },
      { name: "v", hostPath: { path: "/var/lib/kubelet/pods" } },
    ]) {
      const v = await review(
        pod("p", ALPHA, { serviceAccountName: "sa-alpha", volumes: [volume] }) as AdmissionRequest,
        deps(),
      );
      expect({ volume, allowed: v.allowed }).toEqual({ volume, allowed: false });
      expect(v.message).toContain("svc cannot tell whose storage it reaches");
    }
    const ok = await review(
      pod("p", ALPHA, {
        serviceAccountName: "sa-alpha",
        volumes: [
          { name: "a", emptyDir: {} },
          { name: "b", csi: { driver: "csi.spiffe.io", readOnly: true } },
          { name: "c", downwardAPI: { items: [] } },
        ],
      }) as AdmissionRequest,
      deps(),
    );
    expect(ok.allowed).toBe(true);
    // An update decides what it adds: a pod from before keeps the volume it had.
    const legacy = pod("p", ALPHA, {
      serviceAccountName: "sa-alpha",
      volumes: [{ name: "v", nfs: { server: "x", path: "/" } }],
    });
    const kept = { ...legacy, operation: "UPDATE", oldObject: legacy.object } as AdmissionRequest;
    expect((await review(kept, deps())).allowed).toBe(true);
    // The controllers' pods come from templates decided when they were written.
    const controller = {
      ...pod("p", ALPHA, { volumes: [{ name: "v", nfs: { server: "x", path: "/" } }] }),
      ...user("system:kube-controller-manager", []),
    };
    expect((await review(controller as AdmissionRequest, deps())).allowed).toBe(true);
  });

  test("kubectl debug may add containers that name only what the pod may", async () => {
    const debug = (env: Record<string, unknown>) =>
      ({
        uid: "u",
        kind: { group: "", version: "v1", kind: "Pod" },
        resource: { group: "", version: "v1", resource: "pods" },
        subResource: "ephemeralcontainers",
        namespace: "shared",
        name: "p-alpha",
        operation: "UPDATE",
        ...user(),
        oldObject: {
          metadata: { name: "p-alpha", ...labels(ALPHA) },
          spec: { serviceAccountName: "sa-alpha" },
        },
        object: {
          metadata: { name: "p-alpha", ...labels(ALPHA) },
          spec: {
            serviceAccountName: "sa-alpha",
            ephemeralContainers: [{ name: "debugger", image: "busybox", envFrom: [env] }],
          },
        },
      }) as AdmissionRequest;
    const v = await review(debug({ secretRef: { name: "s-bravo" } }), deps());
    expect(v.allowed).toBe(false);
    expect(v.message).toContain("names Secret shared/s-bravo of another compartment (UK-S-BRAVO)");
    expect((await review(debug({ secretRef: { name: "s-alpha" } }), deps())).allowed).toBe(true);
  });

  test("the override passes what an object names, and is recorded as one", async () => {
    const v = await review(
      hpa(ALPHA, { apiVersion: "apps/v1", kind: "Deployment", name: "d-bravo" }, user("olivia")),
      deps({ overrides: ["olivia"] }),
    );
    expect(v).toMatchObject({ allowed: true, decision: "override" });
  });
});
