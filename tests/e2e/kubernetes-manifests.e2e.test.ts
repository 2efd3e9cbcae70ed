import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { parseAllDocuments, stringify } from "yaml";
import { BUN, ROOT } from "../support/proc.ts";
import { useTestbed } from "./support.ts";
import { NODE } from "./testbed/kube.ts";
import { waitUntil } from "./testbed/process.ts";

/**
 * deploy/kubernetes as users apply it: every base renders with kustomize, its svc-proxy configuration
 * passes `svc-proxy -check`, and the test bed's API server (with the SPIFFE CSI driver object and the
 * SPIRE controller manager's ClusterSPIFFEID CRD) accepts it in a server-side dry run. The central proxy
 * is applied for real (into a namespace of its own, through an overlay): its volume is bound,
 * kube-scheduler places its pod on the kwok node, and it runs.
 */
const testbed = useTestbed();
const BASES = ["sidecar", "central", "central-postgres", "spire"];
const dir = (base: string) => join(ROOT, "deploy/kubernetes", base);
let kubectl: (args: string[], input?: string) => { code: number; out: string; err: string };
let work: string;
let overlay: string;

beforeAll(() => {
  const tb = testbed();
  work = join(tb.dir, "kubernetes-manifests");
  mkdirSync(work, { recursive: true });
  kubectl = (args, input) => {
    const r = Bun.spawnSync(
      ["kubectl", `--kubeconfig=${tb.kube.kubeconfig}`, "--context=testbed-admin", ...args],
      {
        stdin: input === undefined ? "ignore" : new TextEncoder().encode(input),
        stdout: "pipe",
        stderr: "pipe",
      },
    );
    return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
  };
  // A namespaced object is checked against its namespace, which a dry run does not create (svc-system
  // is the test bed's already, from deploy/admission).
  kubectl(
    ["apply", "-f", "-"],
    stringify({ apiVersion: "v1", kind: "Namespace", metadata: { name: "svc-example" } }),
  );
  // The central base applied for real, into a namespace of its own.
  overlay = join(work, "central-overlay");
  mkdirSync(overlay, { recursive: true });
  writeFileSync(
    join(overlay, "kustomization.yaml"),
    stringify({
      apiVersion: "kustomize.config.k8s.io/v1beta1",
      kind: "Kustomization",
      namespace: "svc-central-e2e",
      resources: [relative(overlay, dir("central"))],
    }),
  );
});

afterAll(() => {
  kubectl(["delete", "-k", overlay, "--ignore-not-found", "--wait=true", "--timeout=60s"]);
  kubectl(["delete", "namespace", "svc-example", "--ignore-not-found", "--wait=true", "--timeout=60s"]);
  kubectl(["delete", "pv", "svc-central-notary-e2e", "--ignore-not-found"]);
});

interface Container {
  name: string;
  image: string;
  securityContext: unknown;
  readinessProbe?: { httpGet: { path: string } };
}
interface PodSpec {
  securityContext: unknown;
  initContainers?: Container[];
  containers: Container[];
  volumes: unknown[];
}

const rendered = (base: string) => {
  const r = kubectl(["kustomize", dir(base)]);
  if (r.code !== 0) throw new Error(`kubectl kustomize ${base}: ${r.err}`);
  return parseAllDocuments(r.out).map(
    (d) => d.toJS() as { kind: string; metadata: { name: string }; data?: Record<string, string> },
  );
};

describe("deploy/kubernetes", () => {
  test.each(BASES)("%s renders and the API server accepts it (dry run)", (base) => {
    const objects = rendered(base);
    expect(objects.length).toBeGreaterThan(0);
    const r = kubectl(["apply", "--dry-run=server", "-k", dir(base)]);
    expect(r.err).toBe("");
    expect(r.code).toBe(0);
    for (const o of objects) expect(r.out).toContain(`${o.metadata.name}`);
  });

  test.each([
    "sidecar",
    "central",
    "central-postgres",
  ])("%s: the svc-proxy configuration passes -check", (base) => {
    const cm = rendered(base).find((o) => o.kind === "ConfigMap");
    let config = cm?.data?.["config.yaml"] as string;
    expect(config).toBeDefined();
    // The paths a pod mounts, here: the notary's volume and the password Secret.
    const local = join(work, base);
    mkdirSync(local, { recursive: true });
    writeFileSync(join(local, "password"), "x");
    config = config.replaceAll("/var/lib/svc-proxy", local).replaceAll("/etc/svc-proxy-db", local);
    writeFileSync(join(local, "config.yaml"), config);
    const r = Bun.spawnSync([BUN, "cmd/svc-proxy.ts", "-check", "-config", join(local, "config.yaml")], {
      cwd: ROOT,
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(r.stderr.toString()).toBe("");
    expect(r.stdout.toString()).toContain(": valid (");
    expect(r.exitCode).toBe(0);
  });

  test("the pods run as 65532 on a read-only root, without privilege escalation or capabilities", () => {
    for (const base of ["sidecar", "central", "central-postgres"]) {
      const deployment = rendered(base).find((o) => o.kind === "Deployment") as unknown as {
        spec: { template: { metadata: { annotations: Record<string, string> }; spec: PodSpec } };
      };
      const pod = deployment.spec.template.spec;
      expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 65532 });
      expect(deployment.spec.template.metadata.annotations["prometheus.io/port"]).toBe("7600");
      for (const c of [...(pod.initContainers ?? []), ...pod.containers])
        expect(c.securityContext).toEqual({
          allowPrivilegeEscalation: false,
          readOnlyRootFilesystem: true,
          capabilities: { drop: ["ALL"] },
        });
      const proxy = [...(pod.initContainers ?? []), ...pod.containers].find((c) => c.name === "svc-proxy");
      expect(proxy?.image).toBe("ghcr.io/svc-dev/svc-proxy:0.1.0");
      expect(proxy?.readinessProbe?.httpGet.path).toBe("/readyz");
      expect(pod.volumes).toContainEqual({
        name: "spiffe-workload-api",
        csi: { driver: "csi.spiffe.io", readOnly: true },
      });
    }
  });

  test("the central proxy, applied for real, gets its volume, is scheduled onto the node and runs", async () => {
    // A volume for its claim, as a cluster's storage would provide it.
    expect(
      kubectl(
        ["apply", "-f", "-"],
        stringify({
          apiVersion: "v1",
          kind: "PersistentVolume",
          metadata: { name: "svc-central-notary-e2e" },
          spec: {
            capacity: { storage: "1Gi" },
            accessModes: ["ReadWriteOnce"],
            persistentVolumeReclaimPolicy: "Retain",
            hostPath: { path: join(work, "pv") },
          },
        }),
      ).code,
    ).toBe(0);
    const applied = kubectl(["apply", "-k", overlay]);
    expect(applied.err).toBe("");
    const jsonpath = (what: string[], path: string) =>
      kubectl(["-n", "svc-central-e2e", "get", ...what, "-o", `jsonpath=${path}`]).out.trim();
    await waitUntil(
      "the claim bound",
      () => jsonpath(["pvc/svc-central-notary"], "{.status.phase}") === "Bound",
      60_000,
    );
    const pod = () =>
      jsonpath(["pods", "-l", "app.kubernetes.io/name=svc-central"], "{.items[0].metadata.name}");
    await waitUntil("a pod", () => pod() !== "", 60_000);
    await waitUntil(
      "the pod running",
      () => jsonpath([`pod/${pod()}`], "{.status.phase}") === "Running",
      60_000,
    );
    expect(jsonpath([`pod/${pod()}`], "{.spec.nodeName}")).toBe(NODE);
    const events = kubectl([
      "-n",
      "svc-central-e2e",
      "get",
      "events",
      "--field-selector",
      `involvedObject.name=${pod()},reason=Scheduled`,
      "-o",
      "jsonpath={.items[*].message}",
    ]).out;
    expect(events).toContain(`Successfully assigned svc-central-e2e/${pod()} to ${NODE}`);
  }, 180_000);
});
