import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connect } from "node:tls";
import { stringify } from "yaml";
import { clearancesOf, missingClearances, parseCompartmentLabel } from "../../lib/kube/clearance.ts";
import { waitUntil } from "../support/wait.ts";
import { auditSince, auditSize, kubectlArgv, kubectlUser, useTestbed } from "./support.ts";
import { kubectlAs } from "./testbed/index.ts";
import type { KubeState } from "./testbed/kube.ts";
import { NODE } from "./testbed/kube.ts";

/**
 * The cluster enforces compartments without svc (docs/admission.md): plain kubectl, as users whose client
 * certificates carry svc: groups, against the ValidatingAdmissionPolicy and svc-proxy's admission webhook
 * from deploy/admission. Everything lives in namespace alpha, where every developer has RBAC: only the
 * compartment rules keep alice out of the BRAVO objects there.
 */
const testbed = useTestbed();
const NS = "alpha";
const ALPHA = "US-TS-ALPHA";
const BRAVO = "UK-S-BRAVO";

type User = keyof KubeState["users"];
function kubectl(user: User, args: string[], input?: string) {
  return kubectlUser(testbed(), user, NS, args, input);
}

const pod = (name: string, compartment?: string) =>
  stringify({
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS, labels: compartment ? { "svc.io/compartment": compartment } : {} },
    spec: { nodeName: NODE, containers: [{ name: "main", image: "busybox" }] },
  });

const configMap = (name: string, compartment: string, annotations: Record<string, string> = {}) =>
  stringify({
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name, namespace: NS, labels: { "svc.io/compartment": compartment }, annotations },
    data: { a: "b" },
  });

const webhookLog = () =>
  readFileSync(testbed().kube.admission.log, "utf8")
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, unknown>);

beforeAll(async () => {
  const admin = kubectlAs(testbed(), "admin");
  admin(
    ["apply", "-f", "-"],
    [pod("adm-bravo-0", BRAVO), pod("adm-alpha-0", ALPHA), pod("adm-none-0")].join("---\n"),
  );
  admin(["apply", "-f", "-"], configMap("adm-alpha-cm", ALPHA, { "mls.svc.dev/compartment": "us:alpha" }));
  await waitUntil("test pods running", () =>
    ["adm-bravo-0", "adm-alpha-0", "adm-none-0"].every(
      (p) => admin(["-n", NS, "get", "pod", p, "-o", "jsonpath={.status.phase}"]).trim() === "Running",
    ),
  );
});

afterAll(() => {
  // A test bed this file started itself may already be stopped (its hook runs first): nothing to clean.
  try {
    const admin = kubectlAs(testbed(), "admin");
    admin([
      "-n",
      NS,
      "delete",
      "deployment,replicaset,pod,configmap",
      "-l",
      "svc-test=admission",
      "--wait=false",
    ]);
    admin([
      "-n",
      NS,
      "delete",
      "pod",
      "adm-bravo-0",
      "adm-alpha-0",
      "adm-none-0",
      "--wait=false",
      "--ignore-not-found",
    ]);
    admin(["-n", NS, "delete", "configmap", "adm-alpha-cm", "adm-olivia-cm", "--ignore-not-found"]);
  } catch {}
});

describe("into pods (the webhook)", () => {
  const bothNamed = (err: string) => {
    expect(err).toContain(`another compartment (${BRAVO})`);
    expect(err).toContain("you are cleared for compartments alpha");
  };

  test("alice, cleared for ALPHA only, is refused exec, attach, port-forward, proxy and debug into a BRAVO pod", () => {
    const exec = kubectl("alice", ["exec", "adm-bravo-0", "--", "true"]);
    expect(exec.code).not.toBe(0);
    expect(exec.err).toContain("Cannot execute in pod in another compartment");
    bothNamed(exec.err);

    const attach = kubectl("alice", ["attach", "adm-bravo-0", "-c", "main"]);
    expect(attach.code).not.toBe(0);
    expect(attach.err).toContain("Cannot attach to pod in another compartment");
    bothNamed(attach.err);

    // port-forward upgrades its connection before it listens: the refusal ends it at once.
    const forward = kubectl("alice", ["port-forward", "pod/adm-bravo-0", ":80"]);
    expect(forward.code).not.toBe(0);
    expect(forward.err).toContain("Cannot forward ports to pod in another compartment");
    bothNamed(forward.err);

    const proxy = kubectl("alice", ["get", "--raw", `/api/v1/namespaces/${NS}/pods/adm-bravo-0/proxy/`]);
    expect(proxy.code).not.toBe(0);
    expect(proxy.err).toContain("Cannot proxy to pod in another compartment");
    bothNamed(proxy.err);

    const debug = kubectl("alice", ["debug", "adm-bravo-0", "--image=busybox", "--profile=baseline", "-q"]);
    expect(debug.code).not.toBe(0);
    expect(debug.err).toContain("Cannot add a debug container to pod in another compartment");
    bothNamed(debug.err);
  });

  test("alice passes admission into an ALPHA pod; an unlabelled pod is refused (unlabeled_pods: deny)", async () => {
    // The decision, not kwok's stream (which now and then writes to stderr on a loaded machine): the API
    // server let the request through to the node (101 Switching Protocols in its audit log), and kubectl
    // reported no refusal.
    const from = auditSize(testbed());
    const exec = kubectl("alice", ["exec", "adm-alpha-0", "--", "echo", "in-alpha"]);
    expect(exec.err).not.toContain("Forbidden");
    expect(exec.err).not.toContain("denied");
    const upgraded = () =>
      auditSince(testbed(), from).some(
        (e) =>
          e.user.username === "alice" &&
          e.objectRef?.subresource === "exec" &&
          e.objectRef?.name === "adm-alpha-0" &&
          e.responseStatus?.code === 101,
      );
    await waitUntil("alice's exec let through in the audit log", upgraded);
    const debug = kubectl("alice", ["debug", "adm-alpha-0", "--image=busybox", "--profile=baseline", "-q"]);
    expect(debug.err).not.toContain("denied");
    expect(debug.code).toBe(0);

    const none = kubectl("alice", ["exec", "adm-none-0", "--", "true"]);
    expect(none.code).not.toBe(0);
    expect(none.err).toContain("pod without a compartment label");
  });

  test("over WebSocket, kubectl's default, alice's exec passes into the ALPHA pod and is refused into the BRAVO pod", () => {
    // The other tests run kubectl exec over SPDY (support.ts says why); the webhook sees the same request.
    const overWebSocket = (pod: string) =>
      Bun.spawnSync(kubectlArgv(testbed(), "alice", NS, ["exec", pod, "--", "true"]), {
        env: { ...process.env, KUBECTL_REMOTE_COMMAND_WEBSOCKETS: "true" },
        stdin: "ignore",
        timeout: 30_000,
      });
    const passed = overWebSocket("adm-alpha-0");
    expect(passed.stderr.toString()).not.toContain("denied");
    expect(passed.exitCode).toBe(0);
    const refused = overWebSocket("adm-bravo-0");
    expect(refused.exitCode).not.toBe(0);
    expect(refused.stderr.toString()).toContain("Cannot execute in pod in another compartment");
    bothNamed(refused.stderr.toString());
  });

  test("bob, cleared for BRAVO, is refused the ALPHA pod; the message names both compartments", () => {
    // bob has no RBAC in alpha's namespace, so the refusal comes from RBAC before admission: use a pod
    // in bravo's namespace labelled ALPHA instead.
    const admin = kubectlAs(testbed(), "admin");
    admin(
      ["apply", "-f", "-"],
      pod("adm-alpha-in-bravo", ALPHA).replace(`namespace: ${NS}`, "namespace: bravo"),
    );
    const r = Bun.spawnSync([
      "kubectl",
      `--kubeconfig=${testbed().kube.kubeconfig}`,
      "--context=testbed-bob",
      "-n",
      "bravo",
      "exec",
      "adm-alpha-in-bravo",
      "--",
      "true",
    ]);
    admin(["-n", "bravo", "delete", "pod", "adm-alpha-in-bravo", "--wait=false"]);
    expect(r.exitCode).not.toBe(0);
    expect(r.stderr.toString()).toContain(`another compartment (${ALPHA})`);
    expect(r.stderr.toString()).toContain("you are cleared for compartments bravo");
  });

  test("olivia holds the override: she passes into the BRAVO pod and the webhook logs it", async () => {
    const exec = kubectl("olivia", ["exec", "adm-bravo-0", "--", "echo", "forced"]);
    expect(exec.err).toBe("");
    expect(exec.out).toContain("forced");
    await waitUntil("the override in the webhook's log", () =>
      webhookLog().some(
        (l) => l.msg === "compartment override" && l.user === "olivia" && l.object === `${NS}/adm-bravo-0`,
      ),
    );
  });

  test("with the webhook stopped, exec is refused (failurePolicy Fail), and it serves again when resumed", async () => {
    const { pid, url } = testbed().kube.admission;
    process.kill(pid, "SIGSTOP");
    let r: ReturnType<typeof kubectl>;
    try {
      r = kubectl("alice", ["exec", "adm-alpha-0", "--", "true"]);
    } finally {
      process.kill(pid, "SIGCONT");
    }
    expect(r.code).not.toBe(0);
    expect(r.err).toContain('failed calling webhook "pod-access.svc.dev"');
    const ca = readFileSync(join(testbed().dir, "ca.pem"), "utf8");
    await waitUntil(
      "the webhook answering again",
      async () => (await fetch(`${url}/readyz`, { tls: { ca } })).ok,
    );
    expect(kubectl("alice", ["exec", "adm-alpha-0", "--", "true"]).code).toBe(0);
  });

  test("reviews that are not AdmissionReviews, or too large, are answered 400 or 413; the webhook serves on", async () => {
    const { url } = testbed().kube.admission;
    const ca = readFileSync(join(testbed().dir, "ca.pem"), "utf8");
    const post = async (body: string) =>
      (await fetch(`${url}/validate`, { method: "POST", body, tls: { ca } })).status;
    expect(await post("not json")).toBe(400);
    expect(await post("null")).toBe(400);
    expect(await post("[]")).toBe(400);
    expect(await post(JSON.stringify({ kind: "AdmissionReview", request: {} }))).toBe(400);
    expect(
      await post(JSON.stringify({ kind: "AdmissionReview", request: { uid: "x".repeat(9 * 1024 * 1024) } })),
    ).toBe(413);
    const odd = await fetch(`${url}/validate`, {
      method: "POST",
      tls: { ca },
      body: JSON.stringify({
        apiVersion: "admission.k8s.io/v1",
        kind: "AdmissionReview",
        request: {
          uid: "odd",
          subResource: { toString: 1 },
          namespace: ["alpha"],
          userInfo: { groups: "x" },
        },
      }),
    });
    expect(await odd.json()).toMatchObject({ response: { uid: "odd", allowed: false } });
    expect(kubectl("alice", ["exec", "adm-alpha-0", "--", "true"]).code).toBe(0);
  });

  test("a new serving certificate written over the files is served without a restart", async () => {
    const { url, log } = testbed().kube.admission;
    const dir = join(testbed().dir, "admission");
    const serial = () =>
      new Promise<string>((resolve, reject) => {
        const u = new URL(url);
        const s = connect({ host: u.hostname, port: Number(u.port), rejectUnauthorized: false }, () => {
          resolve(s.getPeerCertificate().serialNumber);
          s.end();
        });
        s.on("error", reject);
      });
    const before = await serial();
    // Another pair from the same CA (the kube-apiserver's, valid for 127.0.0.1) replaces the files by
    // rename, as a Secret volume update does.
    const reloads = () => readFileSync(log, "utf8").split("serving certificate reloaded").length - 1;
    const seen = reloads();
    writeFileSync(join(dir, "own.crt"), readFileSync(join(dir, "tls.crt")));
    writeFileSync(join(dir, "own.key"), readFileSync(join(dir, "tls.key")), { mode: 0o600 });
    writeFileSync(join(dir, "next.crt"), readFileSync(join(testbed().dir, "apiserver.pem")));
    writeFileSync(join(dir, "next.key"), readFileSync(join(testbed().dir, "apiserver.key")), { mode: 0o600 });
    renameSync(join(dir, "next.key"), join(dir, "tls.key"));
    renameSync(join(dir, "next.crt"), join(dir, "tls.crt"));
    await waitUntil("the certificate reload in the webhook's log", () => reloads() > seen);
    await waitUntil("the new certificate served", async () => (await serial()) !== before);
    expect(kubectl("alice", ["exec", "adm-alpha-0", "--", "true"]).code).toBe(0);
    // The webhook's own pair back, for the test files after this one.
    renameSync(join(dir, "own.key"), join(dir, "tls.key"));
    renameSync(join(dir, "own.crt"), join(dir, "tls.crt"));
    await waitUntil("the webhook's own certificate served again", async () => (await serial()) === before);
  });
});

describe("writes (the ValidatingAdmissionPolicy)", () => {
  test("alice is refused creating a BRAVO object, in the object or in a pod template", () => {
    const cm = kubectl("alice", ["create", "-f", "-"], configMap("adm-bravo-cm", BRAVO));
    expect(cm.code).not.toBe(0);
    expect(cm.err).toContain(`svc.io/compartment=${BRAVO}`);
    expect(cm.err).toContain("you are cleared for compartments alpha");

    const deployment = stringify({
      apiVersion: "apps/v1",
      kind: "Deployment",
      metadata: { name: "adm-bravo-deploy", namespace: NS, labels: { "svc-test": "admission" } },
      spec: {
        selector: { matchLabels: { app: "adm-bravo" } },
        template: {
          metadata: { labels: { app: "adm-bravo", "svc.io/compartment": BRAVO } },
          spec: { containers: [{ name: "main", image: "busybox" }] },
        },
      },
    });
    const d = kubectl("alice", ["create", "-f", "-"], deployment);
    expect(d.code).not.toBe(0);
    expect(d.err).toContain(`svc.io/compartment=${BRAVO}`);

    const annotated = kubectl(
      "alice",
      ["create", "-f", "-"],
      configMap("adm-note-cm", ALPHA, { "mls.svc.dev/compartment": "uk:bravo" }),
    );
    expect(annotated.code).not.toBe(0);
    expect(annotated.err).toContain("mls.svc.dev/compartment=uk:bravo");
  });

  test("alice is refused relabelling or re-annotating an object, even her own compartment's", () => {
    const relabel = kubectl("alice", [
      "label",
      "--overwrite",
      "configmap",
      "adm-alpha-cm",
      `svc.io/compartment=${BRAVO}`,
    ]);
    expect(relabel.code).not.toBe(0);
    expect(relabel.err).toContain(BRAVO);
    expect(relabel.err).toContain("alpha");

    const unlabel = kubectl("alice", ["label", "configmap", "adm-alpha-cm", "svc.io/compartment-"]);
    expect(unlabel.code).not.toBe(0);
    expect(unlabel.err).toContain(`cannot change (svc.io/compartment=${ALPHA}`);

    const annotate = kubectl("alice", [
      "annotate",
      "--overwrite",
      "configmap",
      "adm-alpha-cm",
      "mls.svc.dev/compartment=uk:bravo",
    ]);
    expect(annotate.code).not.toBe(0);
    expect(annotate.err).toContain("mls.svc.dev/compartment=uk:bravo");

    const mark = kubectl("alice", ["annotate", "configmap", "adm-alpha-cm", "mls.svc.dev/level=us:ts"]);
    expect(mark.code).not.toBe(0);
    expect(mark.err).toContain("cannot change");

    // Other keys of her own object stay hers to change.
    expect(kubectl("alice", ["label", "configmap", "adm-alpha-cm", "team=web"]).code).toBe(0);
  });

  test("marks cannot change through a status update either", () => {
    const status = (label: string | null) =>
      kubectl("alice", [
        "patch",
        "pod",
        "adm-alpha-0",
        "--subresource=status",
        "--type=merge",
        "-p",
        JSON.stringify({ metadata: { labels: { "svc.io/compartment": label } } }),
      ]);
    const bravo = status(BRAVO);
    expect(bravo.code).not.toBe(0);
    expect(bravo.err).toContain(
      `Pod adm-alpha-0 is marked for another compartment (svc.io/compartment=${BRAVO})`,
    );
    const removed = status(null);
    expect(removed.code).not.toBe(0);
    expect(removed.err).toContain(`cannot change (svc.io/compartment=${ALPHA} → none)`);
  });

  test("volume claim templates are read too: a stateful set's, and a pod's ephemeral volume's", () => {
    const claim = {
      metadata: { labels: { "svc.io/compartment": BRAVO } },
      spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Gi" } } },
    };
    const sts = stringify({
      apiVersion: "apps/v1",
      kind: "StatefulSet",
      metadata: { name: "adm-sts", namespace: NS, labels: { "svc.io/compartment": ALPHA } },
      spec: {
        serviceName: "adm-sts",
        selector: { matchLabels: { app: "adm-sts" } },
        template: {
          metadata: { labels: { app: "adm-sts", "svc.io/compartment": ALPHA } },
          spec: { containers: [{ name: "main", image: "busybox" }] },
        },
        volumeClaimTemplates: [{ ...claim, metadata: { ...claim.metadata, name: "data" } }],
      },
    });
    const s = kubectl("alice", ["create", "--dry-run=server", "-f", "-"], sts);
    expect(s.code).not.toBe(0);
    expect(s.err).toContain(`marked for another compartment (svc.io/compartment=${BRAVO})`);

    const eph = stringify({
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "adm-eph", namespace: NS, labels: { "svc.io/compartment": ALPHA } },
      spec: {
        containers: [{ name: "main", image: "busybox" }],
        volumes: [{ name: "scratch", ephemeral: { volumeClaimTemplate: claim } }],
      },
    });
    const e = kubectl("alice", ["create", "--dry-run=server", "-f", "-"], eph);
    expect(e.code).not.toBe(0);
    expect(e.err).toContain(`marked for another compartment (svc.io/compartment=${BRAVO})`);
  });

  test("pod templates, controller revisions and bindings carry marks too", () => {
    const template = {
      metadata: { labels: { "svc.io/compartment": BRAVO } },
      spec: { containers: [{ name: "main", image: "busybox" }] },
    };
    const podTemplate = stringify({
      apiVersion: "v1",
      kind: "PodTemplate",
      metadata: { name: "adm-pt", namespace: NS },
      template,
    });
    const pt = kubectl("alice", ["create", "--dry-run=server", "-f", "-"], podTemplate);
    expect(pt.code).not.toBe(0);
    expect(pt.err).toContain(
      `PodTemplate adm-pt is marked for another compartment (svc.io/compartment=${BRAVO})`,
    );

    // A revision becomes a stateful set's pod template when the set is rolled to it.
    const revision = stringify({
      apiVersion: "apps/v1",
      kind: "ControllerRevision",
      metadata: { name: "adm-cr", namespace: NS },
      revision: 1,
      data: { spec: { template: { $patch: "replace", ...template } } },
    });
    const cr = kubectl("alice", ["create", "--dry-run=server", "-f", "-"], revision);
    expect(cr.code).not.toBe(0);
    expect(cr.err).toContain(`ControllerRevision adm-cr is marked for another compartment`);

    // An ALPHA template whose ephemeral volume claim is BRAVO, or carries a key svc does not define.
    const withClaim = (claimMeta: object) => ({
      metadata: { labels: { "svc.io/compartment": ALPHA } },
      spec: {
        containers: [{ name: "main", image: "busybox" }],
        volumes: [
          {
            name: "scratch",
            ephemeral: {
              volumeClaimTemplate: {
                metadata: claimMeta,
                spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Gi" } } },
              },
            },
          },
        ],
      },
    });
    const claimRevision = (name: string, claimMeta: object) =>
      stringify({
        apiVersion: "apps/v1",
        kind: "ControllerRevision",
        metadata: { name, namespace: NS },
        revision: 1,
        data: { spec: { template: { $patch: "replace", ...withClaim(claimMeta) } } },
      });
    const crClaim = kubectl(
      "alice",
      ["create", "--dry-run=server", "-f", "-"],
      claimRevision("adm-cr-claim", { labels: { "svc.io/compartment": BRAVO } }),
    );
    expect(crClaim.err).toContain(`marked for another compartment (svc.io/compartment=${BRAVO})`);
    const ptClaim = kubectl(
      "alice",
      ["create", "--dry-run=server", "-f", "-"],
      stringify({
        apiVersion: "v1",
        kind: "PodTemplate",
        metadata: { name: "adm-pt-claim", namespace: NS },
        template: withClaim({ annotations: { "MLS.svc.dev/level": "us:ts" } }),
      }),
    );
    expect(ptClaim.err).toContain("marks svc cannot read: MLS.svc.dev/level=us:ts");

    // A binding's annotations are merged into its pod.
    const binding = JSON.stringify({
      apiVersion: "v1",
      kind: "Binding",
      metadata: { name: "adm-alpha-0", annotations: { "mls.svc.dev/compartment": "us:alpha" } },
      target: { kind: "Node", name: NODE },
    });
    const file = join(testbed().dir, "adm-binding.json");
    writeFileSync(file, binding);
    const b = kubectl("alice", [
      "create",
      "--raw",
      `/api/v1/namespaces/${NS}/pods/adm-alpha-0/binding`,
      "-f",
      file,
    ]);
    expect(b.code).not.toBe(0);
    expect(b.err).toContain(
      "carries compartment marks (mls.svc.dev/compartment=us:alpha), which would be merged",
    );
  });

  test("mls.svc.dev keys svc does not define, in any case, are marks it cannot read", () => {
    for (const key of ["mls.svc.dev/foo", "mls.svc.dev/Level", "MLS.svc.dev/level"]) {
      const r = kubectl(
        "alice",
        ["create", "--dry-run=server", "-f", "-"],
        configMap("adm-key-cm", ALPHA, { [key]: "us:ts" }),
      );
      expect(r.code).not.toBe(0);
      expect(r.err).toContain(`marks svc cannot read: ${key}=us:ts`);
    }
  });

  test("a malformed compartment label is refused with the shape it must have", () => {
    const r = kubectl("alice", ["create", "-f", "-"], configMap("adm-bad-cm", "ALPHA"));
    expect(r.code).not.toBe(0);
    expect(r.err).toContain("svc.io/compartment=ALPHA");
    expect(r.err).toContain("<COUNTRY>-<SENSITIVITY>-<COMPARTMENT>");
  });

  test("olivia, holding the override, may relabel", () => {
    const admin = kubectlAs(testbed(), "admin");
    admin(["apply", "-f", "-"], configMap("adm-olivia-cm", ALPHA));
    const r = kubectl("olivia", [
      "label",
      "--overwrite",
      "configmap",
      "adm-olivia-cm",
      `svc.io/compartment=${BRAVO}`,
    ]);
    expect(r.err).toBe("");
    expect(r.code).toBe(0);
  });

  test("alice's ALPHA deployment is admitted, and the controllers create its ALPHA pods", async () => {
    const deployment = stringify({
      apiVersion: "apps/v1",
      kind: "Deployment",
      metadata: {
        name: "adm-alpha-deploy",
        namespace: NS,
        labels: { "svc-test": "admission", "svc.io/compartment": ALPHA },
        annotations: { "mls.svc.dev/compartment": "us:alpha", "mls.svc.dev/level": "us:ts" },
      },
      spec: {
        replicas: 2,
        selector: { matchLabels: { app: "adm-alpha", "svc.io/compartment": ALPHA } },
        template: {
          metadata: {
            labels: { app: "adm-alpha", "svc-test": "admission", "svc.io/compartment": ALPHA },
            annotations: { "mls.svc.dev/compartment": "us:alpha", "mls.svc.dev/level": "us:ts" },
          },
          spec: { nodeName: NODE, containers: [{ name: "main", image: "busybox" }] },
        },
      },
    });
    const r = kubectl("alice", ["apply", "-f", "-"], deployment);
    expect(r.err).toBe("");
    const admin = kubectlAs(testbed(), "admin");
    await waitUntil("two pods from the replica set controller", () => {
      const labels = admin([
        "-n",
        NS,
        "get",
        "pods",
        "-l",
        "app=adm-alpha",
        "-o",
        "jsonpath={.items[*].metadata.labels.svc\\.io/compartment}",
      ]);
      return (
        labels
          .trim()
          .split(/\s+/)
          .filter((l) => l === ALPHA).length === 2
      );
    });
  });
});

describe("the policy, the webhook and svc's clearance rule agree", () => {
  // One table of labels, decided three ways for alice (US, TS, alpha): by lib/kube/clearance.ts, by the
  // ValidatingAdmissionPolicy (a server-side dry run of a configmap) and by the webhook (exec into a pod).
  const LABELS = [
    "US-TS-ALPHA",
    "US-S-ALPHA",
    "US-C-ALPHA",
    "US-U-ALPHA",
    "us-ts-alpha",
    "UK-TS-ALPHA",
    "USA-TS-ALPHA",
    "US-TS-BRAVO",
    "US-TS-ALPHA2",
    "UK-S-BRAVO",
    "ALPHA",
    "US-X-ALPHA",
    "US_TS_ALPHA",
  ];
  const groups = ["svc:developers", "svc:country:us", "svc:sensitivity:ts", "svc:compartment:alpha"];
  const expected = (label: string) => {
    const target = parseCompartmentLabel(label);
    return target !== undefined && missingClearances(clearancesOf(groups), target).length === 0;
  };

  beforeAll(async () => {
    const admin = kubectlAs(testbed(), "admin");
    admin(["apply", "-f", "-"], LABELS.map((l, i) => pod(`adm-par-${i}`, l)).join("---\n"));
    await waitUntil("the table's pods running", () =>
      admin([
        "-n",
        NS,
        "get",
        "pods",
        "-o",
        "jsonpath={.items[*].status.phase}",
        ...LABELS.map((_, i) => `adm-par-${i}`),
      ])
        .trim()
        .split(/\s+/)
        .every((p) => p === "Running"),
    );
  });
  afterAll(() => {
    try {
      kubectlAs(
        testbed(),
        "admin",
      )(["-n", NS, "delete", "pod", "--wait=false", ...LABELS.map((_, i) => `adm-par-${i}`)]);
    } catch {}
  });

  test.each(LABELS.map((l, i) => [l, i] as const))("%s", (label, i) => {
    expect(testbed().kube.users.alice.groups).toEqual(groups);
    const want = expected(label);
    const write = kubectl(
      "alice",
      ["create", "--dry-run=server", "-f", "-"],
      configMap(`adm-par-${i}`, label),
    );
    const exec = kubectl("alice", ["exec", `adm-par-${i}`, "--", "true"]);
    expect({ label, policy: write.code === 0, webhook: exec.code === 0 }).toEqual({
      label,
      policy: want,
      webhook: want,
    });
  });
});
