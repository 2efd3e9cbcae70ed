import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { parse, parseAllDocuments, stringify } from "yaml";
import { BUN, ROOT } from "../support/proc.ts";
import { waitUntil } from "../support/wait.ts";
import { useTestbed } from "./support.ts";
import { NODE } from "./testbed/kube.ts";

/**
 * deploy/kubernetes as users apply it: every base renders with kustomize, its svc-proxy configuration
 * passes `svc-proxy -check`, and the test bed's API server (with the SPIFFE CSI driver object and the
 * SPIRE controller manager's ClusterSPIFFEID CRD) accepts it in a server-side dry run. The central proxy
 * is applied for real (into a namespace of its own, through an overlay): its volume is bound,
 * kube-scheduler places its pod on the kwok node, and it runs.
 */
const testbed = useTestbed();
const BASES = ["sidecar", "grpc", "central", "central-postgres", "witness", "spire"];
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
  // is the test bed's already, from deploy/admission; svc-example and svc-witness are made here).
  for (const name of ["svc-example", "svc-witness"])
    kubectl(["apply", "-f", "-"], stringify({ apiVersion: "v1", kind: "Namespace", metadata: { name } }));
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
  for (const name of ["svc-example", "svc-witness"])
    kubectl(["delete", "namespace", name, "--ignore-not-found", "--wait=true", "--timeout=60s"]);
  kubectl(["delete", "pv", "svc-central-notary-e2e", "--ignore-not-found"]);
});

interface Container {
  name: string;
  image: string;
  args?: string[];
  env?: { name: string; value?: string }[];
  securityContext: unknown;
  readinessProbe?: { httpGet: { path: string } };
  volumeMounts?: { name: string; mountPath: string }[];
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

const podSpec = (base: string) =>
  (
    rendered(base).find((o) => o.kind === "Deployment") as unknown as {
      spec: { template: { spec: PodSpec } };
    }
  ).spec.template.spec;

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
    "grpc",
    "central",
    "central-postgres",
    "witness",
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
    for (const base of ["sidecar", "central", "central-postgres", "witness"]) {
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

  test.each([
    "sidecar",
    "grpc",
    "central",
    "central-postgres",
  ])("%s: every container with the Workload API volume names the agent's socket explicitly", (base) => {
    const cm = rendered(base).find((o) => o.kind === "ConfigMap");
    const socket = (
      parse(cm?.data?.["config.yaml"] as string) as { spiffe: { workload_socket_path: string } }
    ).spiffe.workload_socket_path;
    // The name SPIRE's Helm charts and the CSI driver's examples give the socket (docs/kubernetes.md).
    expect(socket).toBe("unix:///spiffe-workload-api/spire-agent.sock");
    const pod = podSpec(base);
    const users = [...(pod.initContainers ?? []), ...pod.containers].filter((c) =>
      c.volumeMounts?.some((m) => m.name === "spiffe-workload-api"),
    );
    expect(users.map((c) => c.name)).toContain("svc-proxy");
    for (const c of users) {
      expect(c.volumeMounts).toContainEqual(
        expect.objectContaining({ name: "spiffe-workload-api", mountPath: "/spiffe-workload-api" }),
      );
      // svc-proxy reads it from its configuration; anything else (svc curl) from SPIFFE_ENDPOINT_SOCKET.
      if (c.name === "svc-proxy") expect(c.args).toEqual(["-config", "/etc/svc-proxy/config.yaml"]);
      else expect(c.env).toContainEqual({ name: "SPIFFE_ENDPOINT_SOCKET", value: socket });
    }
  });

  test.each([
    "sidecar",
    "grpc",
    "central",
    "central-postgres",
  ])("%s: every path svc-proxy reads or writes is on a volume of the right kind", (base) => {
    const cm = rendered(base).find((o) => o.kind === "ConfigMap");
    const config = parse(cm?.data?.["config.yaml"] as string) as {
      spiffe: { workload_socket_path: string };
      notary?: { database?: { path?: string; password_file?: string } };
    };
    const pod = podSpec(base);
    const proxy = [...(pod.initContainers ?? []), ...pod.containers].find((c) => c.name === "svc-proxy");
    // The volume a path lies on: the longest mount path it is under, and what backs it.
    const volumeOf = (path: string) => {
      const mount = (proxy?.volumeMounts ?? [])
        .filter((m) => path.startsWith(`${m.mountPath}/`))
        .sort((a, b) => b.mountPath.length - a.mountPath.length)[0];
      const volume = pod.volumes.find((v) => (v as { name: string }).name === mount?.name) as
        | Record<string, { name?: string; claimName?: string; secretName?: string; driver?: string }>
        | undefined;
      return { mount, volume };
    };
    const configFile = volumeOf(proxy?.args?.[1] ?? "");
    expect(configFile.volume?.configMap?.name).toBe(cm?.metadata.name);
    expect(volumeOf(config.spiffe.workload_socket_path.replace("unix://", "")).volume?.csi?.driver).toBe(
      "csi.spiffe.io",
    );
    const db = config.notary?.database;
    if (db?.path) {
      const v = volumeOf(db.path);
      expect(v.volume?.persistentVolumeClaim?.claimName).toBe("svc-central-notary");
      expect(v.mount).not.toMatchObject({ readOnly: true });
    }
    if (db?.password_file)
      expect(volumeOf(db.password_file).volume?.secret?.secretName).toBe("svc-central-db");
  });

  test.each([
    "central",
    "central-postgres",
  ])("%s: the NetworkPolicies let in every port it serves and out every port it connects to", (base) => {
    const objects = rendered(base);
    const config = parse(objects.find((o) => o.kind === "ConfigMap")?.data?.["config.yaml"] as string) as {
      metricsAddr: string;
      listeners: { address: string; target: { url: string } }[];
      notary?: { database?: { url?: string } };
    };
    type Rule = { ports?: { port: number; protocol: string }[] };
    const policies = objects.filter((o) => o.kind === "NetworkPolicy") as unknown as {
      spec: { ingress?: Rule[]; egress?: Rule[] };
    }[];
    const allows = (rules: Rule[], port: number, protocol = "TCP") =>
      rules.some((r) => !r.ports || r.ports.some((p) => p.port === port && p.protocol === protocol));
    const ingress = policies.flatMap((p) => p.spec.ingress ?? []);
    const egress = policies.flatMap((p) => p.spec.egress ?? []);
    const portOf = (address: string) => Number(address.slice(address.lastIndexOf(":") + 1));
    for (const l of config.listeners) expect(allows(ingress, portOf(l.address))).toBe(true);
    expect(allows(ingress, portOf(config.metricsAddr))).toBe(true);
    const out = config.listeners.map((l) => new URL(l.target.url));
    if (config.notary?.database?.url) out.push(new URL(config.notary.database.url));
    for (const u of out)
      expect({ to: u.host, allowed: allows(egress, Number(u.port)) }).toEqual({ to: u.host, allowed: true });
    expect(allows(egress, 53, "UDP")).toBe(true);
  });

  test("the sidecar, applied for real, runs svc-proxy as a native sidecar of each scheduled replica", () => {
    const applied = kubectl(["apply", "-k", dir("sidecar")]);
    expect(applied.err).toBe("");
    expect(applied.code).toBe(0);
    // Watches the Deployment until both replicas are available (scheduled, started, ready).
    const rollout = kubectl(["-n", "svc-example", "rollout", "status", "deployment/app", "--timeout=90s"]);
    expect(rollout.err).toBe("");
    expect(rollout.out).toContain("successfully rolled out");
    const pods = JSON.parse(
      kubectl(["-n", "svc-example", "get", "pods", "-l", "app.kubernetes.io/name=app", "-o", "json"]).out,
    ) as {
      items: {
        spec: { nodeName: string; initContainers: { name: string; restartPolicy?: string }[] };
        status: {
          phase: string;
          initContainerStatuses: { name: string; started: boolean; ready: boolean }[];
        };
      }[];
    };
    expect(pods.items.length).toBe(2);
    for (const p of pods.items) {
      expect(p.spec.nodeName).toBe(NODE);
      expect(p.status.phase).toBe("Running");
      expect(p.spec.initContainers).toContainEqual(
        expect.objectContaining({ name: "svc-proxy", restartPolicy: "Always" }),
      );
      expect(p.status.initContainerStatuses).toContainEqual(
        expect.objectContaining({ name: "svc-proxy", started: true, ready: true }),
      );
    }
  }, 120_000);

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
