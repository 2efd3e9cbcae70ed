import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { stringify } from "yaml";
import { COMPARTMENT_LABEL as PIN } from "../../lib/kube/mls.ts";
import { waitUntil } from "../support/wait.ts";
import { ALPHA, BRAVO, kubectlUser, marked, useTestbed } from "./support.ts";
import type { KubeState } from "./testbed/kube.ts";
import { NODE } from "./testbed/kube.ts";

/**
 * Compartments hold against indirection (docs/admission.md, "References, names and owners"), with plain kubectl, the policy and the webhook from
 * deploy/admission: controllers adopting across compartments, references from pods and templates,
 * bindings, evictions, scale, tokens and pod addresses. Namespace `shared` is shared by ALPHA and BRAVO,
 * whose developers (alice, bob) hold the standard `edit` ClusterRole there; bindings and pod status are
 * tried in `alpha`, where the test bed's developer role grants them. Objects of the other compartment are
 * made by the admin, as their owners would.
 */
const testbed = useTestbed();
const NS = "shared";

type User = keyof KubeState["users"];
function kubectl(user: User, args: string[], input?: string, ns = NS) {
  return kubectlUser(testbed(), user, ns, args, input);
}
const apply = (user: User, o: object, ns = NS) => kubectl(user, ["apply", "-f", "-"], stringify(o), ns);
const admin = (o: object, ns = NS) => {
  const r = apply("admin", o, ns);
  if (r.code !== 0) throw new Error(`admin apply: ${r.err}`);
};
const jsonpath = (kind: string, name: string, path: string, ns = NS) =>
  kubectl("admin", ["get", kind, name, "-o", `jsonpath=${path}`], undefined, ns).out.trim();

const labels = (compartment: string | undefined, extra: Record<string, string> = {}) =>
  compartment ? { ...extra, [PIN]: compartment } : extra;
const podSpec = (spec: object = {}) => ({ containers: [{ name: "main", image: "busybox" }], ...spec });
const pod = (name: string, compartment?: string, spec: object = {}, extra: Record<string, string> = {}) => ({
  apiVersion: "v1",
  kind: "Pod",
  metadata: { name, labels: labels(compartment, extra) },
  spec: podSpec(spec),
});
const deployment = (
  name: string,
  compartment: string | undefined,
  selector: Record<string, string>,
  spec: object = {},
  replicas = 1,
) => ({
  apiVersion: "apps/v1",
  kind: "Deployment",
  metadata: { name, labels: labels(compartment) },
  spec: {
    replicas,
    selector: { matchLabels: selector },
    template: { metadata: { labels: { ...selector, ...labels(compartment) } }, spec: podSpec(spec) },
  },
});
const replicaSet = (name: string, compartment: string, selector: Record<string, string>, replicas = 1) => ({
  apiVersion: "apps/v1",
  kind: "ReplicaSet",
  metadata: { name, labels: labels(compartment) },
  spec: {
    replicas,
    selector: { matchLabels: selector },
    template: { metadata: { labels: { ...selector, ...labels(compartment) } }, spec: podSpec() },
  },
});

/** The webhook's refusal lines that contain `text`, from its JSON log. */
const webhookRefusals = (text: string) =>
  readFileSync(testbed().kube.admission.log, "utf8")
    .split("\n")
    .filter((l) => l.startsWith("{") && l.includes(text))
    .map((l) => JSON.parse(l) as { msg?: string; message?: string; user?: string });

beforeAll(async () => {
  admin(marked("ServiceAccount", "sa-bravo", BRAVO));
  admin(marked("ServiceAccount", "sa-alpha", ALPHA));
  admin(marked("ConfigMap", "cm-bravo", BRAVO, { data: { a: "b" } }));
  admin(marked("Secret", "s-bravo", BRAVO, { stringData: { a: "b" } }));
  admin(marked("Secret", "s-alpha", ALPHA, { stringData: { a: "b" } }));
  admin(pod("p-bravo", BRAVO, { nodeName: NODE }));
  admin(deployment("d-bravo", BRAVO, { app: "d-bravo", [PIN]: BRAVO }));
  await waitUntil("the BRAVO pod running", () => jsonpath("pod", "p-bravo", "{.status.phase}") === "Running");
});

afterAll(() => {
  // A test bed this file started itself may already be stopped (its hook runs first): nothing to clean.
  try {
    // Everything in `shared` is this file's; in `alpha`, only what it labelled.
    kubectl("admin", [
      "delete",
      "deploy,rs,pod,svc,cm,secret,sa",
      "-l",
      PIN,
      "--wait=false",
      "--ignore-not-found",
    ]);
    kubectl("admin", [
      "delete",
      "deploy,rs,pod",
      "-l",
      "test=indirection",
      "--wait=false",
      "--ignore-not-found",
    ]);
    kubectl(
      "admin",
      ["delete", "pod", "-l", "test=indirection", "--wait=false", "--ignore-not-found"],
      undefined,
      "alpha",
    );
  } catch {}
});

describe("selectors pin the compartment", () => {
  test("a new marked Deployment or Service whose selector does not pin its compartment is refused", () => {
    const d = apply("alice", deployment("d-unpinned", ALPHA, { app: "unpinned" }));
    expect(d.code).not.toBe(0);
    expect(d.err).toContain("its selector must include svc.io/compartment=US-TS-ALPHA");
    const s = apply(
      "alice",
      marked("Service", "s-unpinned", ALPHA, { spec: { selector: { app: "x" }, ports: [{ port: 80 }] } }),
    );
    expect(s.code).not.toBe(0);
    expect(s.err).toContain("its selector must include svc.io/compartment=US-TS-ALPHA");
    const pinned = apply("alice", deployment("d-pinned", ALPHA, { app: "pinned", [PIN]: ALPHA }));
    expect(pinned.err).toBe("");
    // Changing a Service's selector so that it no longer pins is refused too.
    expect(
      apply(
        "alice",
        marked("Service", "s-pinned", ALPHA, {
          spec: { selector: { app: "x", [PIN]: ALPHA }, ports: [{ port: 80 }] },
        }),
      ).code,
    ).toBe(0);
    const unpin = kubectl("alice", [
      "patch",
      "service",
      "s-pinned",
      "--type=json",
      "-p",
      JSON.stringify([{ op: "remove", path: "/spec/selector/svc.io~1compartment" }]),
    ]);
    expect(unpin.code).not.toBe(0);
    expect(unpin.err).toContain("does not pin svc.io/compartment");
  });
});

describe("controllers cannot act across compartments for a user", () => {
  test("a Deployment of ALPHA (from before pinning) cannot adopt an orphan BRAVO ReplicaSet, nor scale it", async () => {
    // The BRAVO ReplicaSet and the old-style ALPHA Deployment are made by the admin (the override): the
    // Deployment stands for one created before selectors were pinned.
    admin({
      ...replicaSet("rs-orphan", BRAVO, { app: "orphan" }, 1),
      metadata: { name: "rs-orphan", labels: { app: "orphan", [PIN]: BRAVO, test: "indirection" } },
    });
    await waitUntil("the orphan's pod", () => jsonpath("rs", "rs-orphan", "{.status.replicas}") === "1");
    admin({
      ...deployment("d-grabber", ALPHA, { app: "orphan" }, {}, 3),
      metadata: { name: "d-grabber", labels: { [PIN]: ALPHA, test: "indirection" } },
    });
    await waitUntil(
      "the deployment controller's adoption refused",
      () =>
        webhookRefusals(
          "ReplicaSet shared/rs-orphan (UK-S-BRAVO) cannot be owned by Deployment shared/d-grabber of another compartment (US-TS-ALPHA)",
        ).length > 0,
    );
    expect(jsonpath("rs", "rs-orphan", "{.metadata.ownerReferences}")).toBe("");
    expect(jsonpath("rs", "rs-orphan", "{.spec.replicas}")).toBe("1");
  });

  test("an ALPHA pod relabelled to match a BRAVO ReplicaSet's selector is not adopted; no BRAVO pod is deleted", async () => {
    const bravoPods = () =>
      kubectl("admin", ["get", "pods", "-l", `app=orphan,${PIN}=${BRAVO}`, "-o", "name"]).out.trim();
    const before = bravoPods();
    expect(apply("alice", pod("p-relabel", ALPHA, { nodeName: NODE }, { test: "indirection" })).code).toBe(0);
    expect(kubectl("alice", ["label", "pod", "p-relabel", "app=orphan"]).code).toBe(0);
    await waitUntil(
      "the replica set controller's adoption refused",
      () =>
        webhookRefusals(
          "Pod shared/p-relabel (US-TS-ALPHA) cannot be owned by ReplicaSet shared/rs-orphan of another compartment (UK-S-BRAVO)",
        ).length > 0,
    );
    expect(jsonpath("pod", "p-relabel", "{.metadata.ownerReferences}")).toBe("");
    expect(bravoPods()).toBe(before);
  });

  test("a Deployment re-adopts its own compartment's ReplicaSet", async () => {
    apply("alice", deployment("d-own", ALPHA, { app: "own", [PIN]: ALPHA }));
    await waitUntil(
      "its replica set",
      () => kubectl("admin", ["get", "rs", "-l", "app=own", "-o", "name"]).out.trim() !== "",
    );
    const rs = kubectl("admin", [
      "get",
      "rs",
      "-l",
      "app=own",
      "-o",
      "jsonpath={.items[0].metadata.name}",
    ]).out.trim();
    expect(kubectl("alice", ["delete", "deployment", "d-own", "--cascade=orphan"]).code).toBe(0);
    await waitUntil(
      "the replica set orphaned",
      () => jsonpath("rs", rs, "{.metadata.ownerReferences}") === "",
    );
    expect(apply("alice", deployment("d-own", ALPHA, { app: "own", [PIN]: ALPHA })).code).toBe(0);
    const uid = jsonpath("deployment", "d-own", "{.metadata.uid}");
    await waitUntil(
      "the replica set adopted again",
      () => jsonpath("rs", rs, "{.metadata.ownerReferences[0].uid}") === uid,
    );
  });
});

describe("references from pods and templates stay in the compartment", () => {
  test("an ALPHA pod using BRAVO's ServiceAccount, ConfigMap or Secret is refused, naming both compartments", () => {
    for (const [spec, what] of [
      [{ serviceAccountName: "sa-bravo" }, "ServiceAccount shared/sa-bravo"],
      [{ volumes: [{ name: "v", configMap: { name: "cm-bravo" } }] }, "ConfigMap shared/cm-bravo"],
      [
        { volumes: [{ name: "v", projected: { sources: [{ secret: { name: "s-bravo" } }] } }] },
        "Secret shared/s-bravo",
      ],
      [
        { containers: [{ name: "c", image: "busybox", envFrom: [{ secretRef: { name: "s-bravo" } }] }] },
        "Secret shared/s-bravo",
      ],
    ] as const) {
      const r = apply("alice", pod("p-ref", ALPHA, spec));
      expect(r.code).not.toBe(0);
      expect(r.err).toContain(
        `Pod shared/p-ref (US-TS-ALPHA) names ${what} of another compartment (UK-S-BRAVO)`,
      );
    }
    const d = apply(
      "alice",
      deployment("d-ref", ALPHA, { app: "ref", [PIN]: ALPHA }, { serviceAccountName: "sa-bravo" }),
    );
    expect(d.code).not.toBe(0);
    expect(d.err).toContain("names ServiceAccount shared/sa-bravo of another compartment (UK-S-BRAVO)");
  });

  test("a pod of ALPHA with ALPHA's Secret and ServiceAccount is admitted, and so are the controllers' pods", async () => {
    const spec = {
      serviceAccountName: "sa-alpha",
      volumes: [{ name: "v", secret: { secretName: "s-alpha" } }],
    };
    expect(apply("alice", pod("p-own-ref", ALPHA, { ...spec, nodeName: NODE })).err).toBe("");
    expect(apply("alice", deployment("d-own-ref", ALPHA, { app: "own-ref", [PIN]: ALPHA }, spec)).err).toBe(
      "",
    );
    await waitUntil(
      "the controller's pod",
      () => jsonpath("deployment", "d-own-ref", "{.status.readyReplicas}") === "1",
    );
  });

  test("bob is refused ALPHA's Secret the same way", () => {
    const r = apply(
      "bob",
      pod("p-bob-ref", BRAVO, { volumes: [{ name: "v", secret: { secretName: "s-alpha" } }] }),
    );
    expect(r.code).not.toBe(0);
    expect(r.err).toContain(
      "Pod shared/p-bob-ref (UK-S-BRAVO) names Secret shared/s-alpha of another compartment (US-TS-ALPHA)",
    );
  });
});

describe("bindings, evictions, scale, tokens and addresses", () => {
  const eviction = (name: string) =>
    JSON.stringify({ apiVersion: "policy/v1", kind: "Eviction", metadata: { name, namespace: NS } });

  test("evicting another compartment's pod is refused; one's own is evicted", () => {
    const r = kubectl(
      "alice",
      ["create", "--raw", `/api/v1/namespaces/${NS}/pods/p-bravo/eviction`, "-f", "-"],
      eviction("p-bravo"),
    );
    expect(r.code).not.toBe(0);
    expect(r.err).toContain("Cannot evict pod in another compartment (UK-S-BRAVO)");
    expect(apply("alice", pod("p-evict", ALPHA, { nodeName: NODE })).code).toBe(0);
    const own = kubectl(
      "alice",
      ["create", "--raw", `/api/v1/namespaces/${NS}/pods/p-evict/eviction`, "-f", "-"],
      eviction("p-evict"),
    );
    expect(own.err).toBe("");
  });

  test("scaling another compartment's Deployment is refused (the edit role grants it); one's own scales", async () => {
    const r = kubectl("alice", ["scale", "deployment", "d-bravo", "--replicas=3"]);
    expect(r.code).not.toBe(0);
    expect(r.err).toContain("Cannot scale Deployment in another compartment (UK-S-BRAVO)");
    expect(jsonpath("deployment", "d-bravo", "{.spec.replicas}")).toBe("1");
    expect(kubectl("bob", ["scale", "deployment", "d-bravo", "--replicas=2"]).code).toBe(0);
    await waitUntil("bob's scale", () => jsonpath("deployment", "d-bravo", "{.status.replicas}") === "2");
  });

  test("a token for another compartment's service account is refused", () => {
    const r = kubectl("alice", ["create", "token", "sa-bravo"]);
    expect(r.code).not.toBe(0);
    expect(r.err).toContain("Cannot request a token for service account in another compartment (UK-S-BRAVO)");
    expect(kubectl("alice", ["create", "token", "sa-alpha"]).code).toBe(0);
  });

  test("binding another compartment's pending pod is refused; one's own binds; the scheduler binds the rest", async () => {
    // schedulerName "none": kube-scheduler leaves these pods pending for the test to bind.
    const pending = (name: string, c: string) => ({
      ...pod(name, c, { schedulerName: "none" }, { test: "indirection" }),
    });
    admin(pending("pending-bravo", BRAVO), "alpha");
    expect(apply("alice", pending("pending-alpha", ALPHA), "alpha").code).toBe(0);
    const binding = (name: string) =>
      JSON.stringify({
        apiVersion: "v1",
        kind: "Binding",
        metadata: { name },
        target: { apiVersion: "v1", kind: "Node", name: NODE },
      });
    const r = kubectl(
      "alice",
      ["create", "--raw", `/api/v1/namespaces/alpha/pods/pending-bravo/binding`, "-f", "-"],
      binding("pending-bravo"),
      "alpha",
    );
    expect(r.code).not.toBe(0);
    expect(r.err).toContain("Cannot bind pod in another compartment (UK-S-BRAVO)");
    expect(jsonpath("pod", "pending-bravo", "{.spec.nodeName}", "alpha")).toBe("");
    const own = kubectl(
      "alice",
      ["create", "--raw", `/api/v1/namespaces/alpha/pods/pending-alpha/binding`, "-f", "-"],
      binding("pending-alpha"),
      "alpha",
    );
    expect(own.err).toBe("");
    expect(jsonpath("pod", "pending-alpha", "{.spec.nodeName}", "alpha")).toBe(NODE);
    // The scheduler's own bindings: the pods the controllers made above were all placed.
    expect(jsonpath("pod", "p-bravo", "{.spec.nodeName}")).toBe(NODE);
  });

  test("a user who may write their pod's status cannot change its addresses; other status fields still change", async () => {
    expect(
      apply("alice", pod("p-status", ALPHA, { nodeName: NODE }, { test: "indirection" }), "alpha").code,
    ).toBe(0);
    await waitUntil("an address", () => jsonpath("pod", "p-status", "{.status.podIP}", "alpha") !== "");
    const ip = jsonpath("pod", "p-bravo", "{.status.podIP}") || "10.0.0.99";
    // Each address with its list, as the API server's validation wants them to agree.
    for (const patch of [
      { podIP: ip, podIPs: [{ ip }] },
      { hostIP: "10.9.9.9", hostIPs: [{ ip: "10.9.9.9" }] },
      { nominatedNodeName: "elsewhere" },
    ]) {
      const r = kubectl(
        "alice",
        [
          "patch",
          "pod",
          "p-status",
          "--subresource=status",
          "--type=merge",
          "-p",
          JSON.stringify({ status: patch }),
        ],
        undefined,
        "alpha",
      );
      expect(r.code).not.toBe(0);
      expect(r.err).toContain("are written only by the control plane");
    }
    const ok = kubectl(
      "alice",
      [
        "patch",
        "pod",
        "p-status",
        "--subresource=status",
        "--type=merge",
        "-p",
        JSON.stringify({ status: { message: "fine" } }),
      ],
      undefined,
      "alpha",
    );
    expect(ok.err).toBe("");
  });
});
