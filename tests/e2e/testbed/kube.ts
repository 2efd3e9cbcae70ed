import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parse, stringify } from "yaml";
import { waitUntil } from "../../support/wait.ts";
import { type AdmissionState, startAdmission } from "./admission.ts";
import type { Peers } from "./peers.ts";
import { writeClusterPki } from "./pki.ts";
import { freePort, run, startDaemon } from "./process.ts";

const REPO = new URL("../../..", import.meta.url).pathname.replace(/\/$/, "");

/**
 * etcd + kube-apiserver (RBAC, client certificates and static tokens) + kube-controller-manager (the
 * deployment, replica set, namespace, garbage-collector, PersistentVolume binder and ClusterRole
 * aggregation controllers, each with its own service account) + kube-scheduler + kwok with one fake node whose pods support exec, logs and
 * port-forward; the csi.spiffe.io CSIDriver and the ClusterSPIFFEID CRD are installed as objects.
 * Users: an admin, a developer cleared for US-TS-ALPHA, one cleared for UK-S-BRAVO, and one cleared for
 * US-TS-ALPHA who holds the compartment override. Their kubeconfig entries carry client certificates whose
 * organisations are their groups.
 */
export interface KubeUser {
  name: string;
  token: string;
  groups: string[];
  context: string;
  namespace: string;
}

export interface KubeState {
  kubeconfig: string;
  apiserver: string;
  users: Record<"admin" | "alice" | "bob" | "olivia", KubeUser>;
  pids: Record<string, number>;
  /** Where kwok's ClusterLogs reads the container log of every fake pod (CRI format). */
  podLog: string;
  /** The log of every fake pod's previous container (`kubectl logs --previous`). */
  podPreviousLog: string;
  /** The loopback port every fake pod's port-forward reaches. */
  forwardPort: number;
  /**
   * kube-apiserver's audit log (JSON lines): every request into a pod (exec, attach, port-forward,
   * ephemeral containers) and every write, at Metadata level; reads are not logged.
   */
  auditLog: string;
  /** svc-proxy serving the admission webhook (deploy/admission, with the webhook at a loopback URL). */
  admission: AdmissionState;
}

const AUDIT_POLICY = {
  apiVersion: "audit.k8s.io/v1",
  kind: "Policy",
  omitStages: ["RequestReceived"],
  rules: [
    {
      level: "Metadata",
      resources: [
        {
          group: "",
          resources: [
            "pods/exec",
            "pods/attach",
            "pods/portforward",
            "pods/ephemeralcontainers",
            "pods/proxy",
            "services/proxy",
            "nodes/proxy",
          ],
        },
      ],
    },
    // Lists of the kinds that hold data, with who listed them (svc lists their metadata only).
    { level: "Metadata", verbs: ["list"], resources: [{ group: "", resources: ["secrets", "configmaps"] }] },
    { level: "None", verbs: ["get", "list", "watch"] },
    { level: "Metadata" },
  ],
};

const token = () => Buffer.from(crypto.getRandomValues(new Uint8Array(18))).toString("base64url");

export const NODE = "kwok-node-0";

/**
 * A namespace that holds compartments' pods, under Pod Security admission's baseline level: no host
 * namespaces, host paths or privileged containers, the ways out of a pod into the node and the other pods
 * on it (docs/admission.md, "Pod Security").
 */
const compartmentNamespace = (name: string) => ({
  apiVersion: "v1",
  kind: "Namespace",
  metadata: {
    name,
    labels: {
      "pod-security.kubernetes.io/enforce": "baseline",
      "pod-security.kubernetes.io/enforce-version": "latest",
    },
  },
});

function rbac(): string {
  const docs: object[] = [];
  for (const ns of ["alpha", "bravo"]) {
    docs.push(compartmentNamespace(ns));
    docs.push({
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "Role",
      metadata: { name: "developer", namespace: ns },
      rules: [
        {
          apiGroups: [""],
          resources: ["pods", "pods/log", "services", "configmaps", "serviceaccounts", "podtemplates"],
          verbs: ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
          apiGroups: [""],
          resources: ["pods/exec", "pods/portforward", "pods/attach", "pods/proxy"],
          verbs: ["get", "create"],
        },
        {
          apiGroups: [""],
          resources: ["pods/ephemeralcontainers", "pods/status"],
          verbs: ["get", "patch", "update"],
        },
        { apiGroups: [""], resources: ["pods/binding"], verbs: ["create"] },
        {
          apiGroups: ["apps"],
          resources: ["deployments", "replicasets", "statefulsets", "controllerrevisions"],
          verbs: ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
          apiGroups: ["batch"],
          resources: ["jobs", "cronjobs"],
          verbs: ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
      ],
    });
    docs.push({
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "RoleBinding",
      metadata: { name: "developers", namespace: ns },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "developer" },
      subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "Group", name: `svc:compartment:${ns}` }],
    });
  }
  // A namespace two compartments share, where their developers hold the standard `edit` ClusterRole: only
  // the compartment rules keep them apart there (tests/e2e/admission-indirection.e2e.test.ts).
  docs.push(compartmentNamespace("shared"));
  docs.push({
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "RoleBinding",
    metadata: { name: "editors", namespace: "shared" },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "edit" },
    subjects: ["alpha", "bravo"].map((c) => ({
      apiGroup: "rbac.authorization.k8s.io",
      kind: "Group",
      name: `svc:compartment:${c}`,
    })),
  });
  // The compartment override (its ClusterRole comes with deploy/admission) for the group svc:overriders.
  docs.push({
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "ClusterRoleBinding",
    metadata: { name: "svc-compartment-override-overriders" },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "svc-compartment-override" },
    subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "Group", name: "svc:overriders" }],
  });
  return docs.map((d) => stringify(d)).join("---\n");
}

function kwokConfig(
  stagesDir: string,
  workDir: string,
  podLog: string,
  previousLog: string,
  forwardPort: number,
): string {
  const stages = readdirSync(stagesDir)
    .filter((f) => f.endsWith(".yaml"))
    .sort()
    .map((f) => readFileSync(join(stagesDir, f), "utf8").trim());
  const rules = [
    {
      apiVersion: "kwok.x-k8s.io/v1alpha1",
      kind: "ClusterExec",
      metadata: { name: "exec-on-host" },
      spec: { execs: [{ local: { workDir } }] },
    },
    {
      apiVersion: "kwok.x-k8s.io/v1alpha1",
      kind: "ClusterLogs",
      metadata: { name: "logs" },
      spec: { logs: [{ logsFile: podLog, previousLogsFile: previousLog, follow: true }] },
    },
    {
      apiVersion: "kwok.x-k8s.io/v1alpha1",
      kind: "ClusterPortForward",
      metadata: { name: "forward" },
      spec: { forwards: [{ target: { port: forwardPort, address: "127.0.0.1" } }] },
    },
  ].map((r) => stringify(r).trim());
  return `${[...stages, ...rules].join("\n---\n")}\n`;
}

/**
 * deploy/admission/authorization as shipped, with its webhook at the test bed's svc-proxy admission server
 * (started after the API server; until then guarded reads are denied, as the failure policy says).
 */
function authorizationConfig(dir: string, caPem: string, port: number): string {
  const shipped = join(REPO, "deploy", "admission", "authorization");
  const kubeconfig = parse(readFileSync(join(shipped, "webhook-kubeconfig.yaml"), "utf8"));
  kubeconfig.clusters[0].cluster = {
    server: `https://127.0.0.1:${port}/authorize`,
    "certificate-authority-data": Buffer.from(caPem).toString("base64"),
  };
  const kubeconfigFile = join(dir, "authorization-webhook.kubeconfig");
  writeFileSync(kubeconfigFile, stringify(kubeconfig), { mode: 0o600 });
  const config = parse(readFileSync(join(shipped, "authorization-config.yaml"), "utf8"));
  for (const a of config.authorizers)
    if (a.type === "Webhook") a.webhook.connectionInfo.kubeConfigFile = kubeconfigFile;
  const file = join(dir, "authorization-config.yaml");
  writeFileSync(file, stringify(config));
  return file;
}

export async function startKube(p: Peers, dir: string, logs: string): Promise<KubeState> {
  const pki = await writeClusterPki(dir);
  const [etcdClient, etcdPeer, apiPort, kwokPort, forwardPort, admissionPort] = await Promise.all([
    freePort(),
    freePort(),
    freePort(),
    freePort(),
    freePort(),
    freePort(),
  ]);
  const pids: Record<string, number> = {};
  pids.etcd = startDaemon(
    p.etcd,
    [
      "--name=testbed",
      `--data-dir=${join(dir, "etcd")}`,
      `--listen-client-urls=http://127.0.0.1:${etcdClient}`,
      `--advertise-client-urls=http://127.0.0.1:${etcdClient}`,
      `--listen-peer-urls=http://127.0.0.1:${etcdPeer}`,
      `--initial-advertise-peer-urls=http://127.0.0.1:${etcdPeer}`,
      `--initial-cluster=testbed=http://127.0.0.1:${etcdPeer}`,
      "--unsafe-no-fsync",
    ],
    join(logs, "etcd.log"),
  );
  await waitUntil("etcd", async () => (await fetch(`http://127.0.0.1:${etcdClient}/health`)).ok, 30_000);

  const users: KubeState["users"] = {
    admin: {
      name: "svc-admin",
      token: token(),
      groups: ["system:masters"],
      context: "testbed-admin",
      namespace: "default",
    },
    alice: {
      name: "alice",
      token: token(),
      groups: ["svc:developers", "svc:country:us", "svc:sensitivity:ts", "svc:compartment:alpha"],
      context: "testbed-alice",
      namespace: "alpha",
    },
    bob: {
      name: "bob",
      token: token(),
      groups: ["svc:developers", "svc:country:uk", "svc:sensitivity:s", "svc:compartment:bravo"],
      context: "testbed-bob",
      namespace: "bravo",
    },
    olivia: {
      name: "olivia",
      token: token(),
      groups: [
        "svc:developers",
        "svc:country:us",
        "svc:sensitivity:ts",
        "svc:compartment:alpha",
        "svc:overriders",
      ],
      context: "testbed-olivia",
      namespace: "alpha",
    },
  };
  const certs = Object.fromEntries(
    await Promise.all(
      Object.entries(users).map(async ([k, u]) => [k, await pki.clientCert(u.name, u.groups)] as const),
    ),
  );
  const tokenFile = join(dir, "tokens.csv");
  writeFileSync(
    tokenFile,
    Object.values(users)
      .map((u, i) => `${u.token},${u.name},uid-${i},"${u.groups.join(",")}"`)
      .join("\n"),
    { mode: 0o600 },
  );

  const apiserver = `https://127.0.0.1:${apiPort}`;
  const auditPolicy = join(dir, "audit-policy.yaml");
  writeFileSync(auditPolicy, stringify(AUDIT_POLICY));
  const auditLog = join(dir, "audit.log");
  pids.apiserver = startDaemon(
    p.kubeApiserver,
    [
      `--etcd-servers=http://127.0.0.1:${etcdClient}`,
      "--bind-address=127.0.0.1",
      "--advertise-address=127.0.0.1",
      `--secure-port=${apiPort}`,
      `--tls-cert-file=${pki.servingCertFile}`,
      `--tls-private-key-file=${pki.servingKeyFile}`,
      `--client-ca-file=${pki.caFile}`,
      `--token-auth-file=${tokenFile}`,
      `--authorization-config=${authorizationConfig(dir, pki.caPem, admissionPort)}`,
      "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
      `--service-account-key-file=${pki.saPublicFile}`,
      `--service-account-signing-key-file=${pki.saPrivateFile}`,
      "--service-cluster-ip-range=10.96.0.0/16",
      "--allow-privileged=true",
      "--kubelet-preferred-address-types=InternalIP",
      "--enable-priority-and-fairness=false",
      "--profiling=false",
      "--disable-admission-plugins=ServiceAccount",
      `--audit-policy-file=${auditPolicy}`,
      `--audit-log-path=${auditLog}`,
      "--audit-log-mode=blocking",
    ],
    join(logs, "kube-apiserver.log"),
  );

  const kubeconfig = join(dir, "kubeconfig");
  writeFileSync(
    kubeconfig,
    stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [
        {
          name: "testbed",
          cluster: {
            server: apiserver,
            "certificate-authority-data": Buffer.from(pki.caPem).toString("base64"),
          },
        },
      ],
      users: Object.entries(users).map(([k, u]) => ({
        name: u.name,
        user: {
          "client-certificate-data": Buffer.from(certs[k]?.cert ?? "").toString("base64"),
          "client-key-data": Buffer.from(certs[k]?.key ?? "").toString("base64"),
        },
      })),
      contexts: Object.values(users).map((u) => ({
        name: u.context,
        context: { cluster: "testbed", user: u.name, namespace: u.namespace },
      })),
      "current-context": users.admin.context,
    }),
    { mode: 0o600 },
  );
  const kubectl = (args: string[], input?: string) =>
    run(["kubectl", `--kubeconfig=${kubeconfig}`, "--context=testbed-admin", ...args], {}, input);
  await waitUntil("kube-apiserver", () => kubectl(["get", "--raw=/readyz"]).trim() === "ok", 90_000);
  kubectl(["apply", "-f", "-"], rbac());

  // The deployment, replica set, namespace and garbage-collector controllers, each with its own kube-system service account (as
  // kubeadm runs them), so that the admission policy sees the identities a real cluster's controllers have.
  const kcm = await pki.clientCert("system:kube-controller-manager", []);
  const kcmKubeconfig = join(dir, "controller-manager.kubeconfig");
  writeFileSync(kcmKubeconfig, clientKubeconfig(apiserver, pki.caPem, kcm), { mode: 0o600 });
  pids.controllerManager = startDaemon(
    p.kubeControllerManager,
    [
      `--kubeconfig=${kcmKubeconfig}`,
      "--controllers=deployment,replicaset,namespace,garbagecollector,persistentvolume-binder,pvc-protection,pv-protection,clusterrole-aggregation",
      "--use-service-account-credentials",
      "--leader-elect=false",
      "--secure-port=0",
    ],
    join(logs, "kube-controller-manager.log"),
  );

  // The fake node, created before kwok so kwok manages exactly it.
  kubectl(
    ["apply", "-f", "-"],
    stringify({
      apiVersion: "v1",
      kind: "Node",
      metadata: {
        name: NODE,
        labels: { type: "kwok", "kubernetes.io/hostname": NODE },
        annotations: { "kwok.x-k8s.io/node": "fake" },
      },
      spec: { taints: [] },
    }),
  );
  const podLog = join(dir, "pod.log");
  writeFileSync(podLog, "");
  const podPreviousLog = join(dir, "pod-previous.log");
  writeFileSync(podPreviousLog, `${new Date().toISOString()} stdout F the previous container\n`);
  const kwokConfigFile = join(dir, "kwok.yaml");
  writeFileSync(
    kwokConfigFile,
    kwokConfig(join(p.kwok, "..", "..", "stages"), dir, podLog, podPreviousLog, forwardPort),
  );
  // kwok plays the node's kubelet, so it acts as one: system:node:<name> in group system:nodes (the
  // admission policy leaves kubelets out, as it must: they write pod addresses). It also plays the
  // node's lifecycle, hence cluster-admin on this test bed.
  const kubelet = `system:node:${NODE}`;
  kubectl(
    ["apply", "-f", "-"],
    stringify({
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRoleBinding",
      metadata: { name: "testbed-kwok-node" },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "cluster-admin" },
      subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: kubelet }],
    }),
  );
  const kwokKubeconfig = join(dir, "kwok.kubeconfig");
  writeFileSync(
    kwokKubeconfig,
    clientKubeconfig(apiserver, pki.caPem, await pki.clientCert(kubelet, ["system:nodes"])),
    { mode: 0o600 },
  );
  pids.kwok = startDaemon(
    p.kwok,
    [
      `--kubeconfig=${kwokKubeconfig}`,
      `--config=${kwokConfigFile}`,
      "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
      "--node-ip=127.0.0.1",
      `--node-port=${kwokPort}`,
      `--server-address=127.0.0.1:${kwokPort}`,
    ],
    join(logs, "kwok.log"),
  );
  await waitUntil(
    "kwok node",
    () =>
      kubectl([
        "get",
        "node",
        NODE,
        "-o",
        "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
      ]).trim() === "True",
    60_000,
  );
  // No node lifecycle controller runs to lift the not-ready taint a new node is created with.
  kubectl(["taint", "node", NODE, "node.kubernetes.io/not-ready:NoSchedule-"]);
  pids.scheduler = await startScheduler(
    p,
    apiserver,
    pki.caPem,
    await pki.clientCert("system:kube-scheduler", []),
    dir,
    logs,
  );
  // What deploy/kubernetes expects of a cluster: the SPIFFE CSI driver and the SPIRE controller manager's
  // ClusterSPIFFEID CRD (objects only: no driver or controller runs).
  kubectl(["apply", "-f", "-"], stringify(CSI_DRIVER));
  kubectl(["apply", "-f", p.clusterSpiffeIdCrd]);
  kubectl(["wait", "--for=condition=Established", "--timeout=60s", "crd/clusterspiffeids.spire.spiffe.io"]);
  // The standard `edit` role that namespace `shared` binds is filled in by the aggregation controller.
  await waitUntil(
    "the edit ClusterRole aggregated",
    () => kubectl(["get", "clusterrole", "edit", "-o", "jsonpath={.rules[0].verbs}"]).trim() !== "",
    60_000,
  );
  const admission = await startAdmission(apiserver, pki, dir, logs, kubectl, admissionPort);
  pids.admission = admission.pid;
  return { kubeconfig, apiserver, users, pids, podLog, podPreviousLog, forwardPort, auditLog, admission };
}

const CSI_DRIVER = {
  apiVersion: "storage.k8s.io/v1",
  kind: "CSIDriver",
  metadata: { name: "csi.spiffe.io" },
  spec: {
    attachRequired: false,
    podInfoOnMount: true,
    fsGroupPolicy: "None",
    volumeLifecycleModes: ["Ephemeral"],
  },
};

/**
 * kube-scheduler with its own client certificate (the bootstrap RBAC binds system:kube-scheduler), so
 * that pods created by controllers are placed on the kwok node as in a real cluster.
 */
async function startScheduler(
  p: Peers,
  apiserver: string,
  caPem: string,
  cert: { cert: string; key: string },
  dir: string,
  logs: string,
): Promise<number> {
  const kubeconfig = join(dir, "scheduler.kubeconfig");
  writeFileSync(kubeconfig, clientKubeconfig(apiserver, caPem, cert), { mode: 0o600 });
  return startDaemon(
    p.kubeScheduler,
    [`--kubeconfig=${kubeconfig}`, "--leader-elect=false", "--secure-port=0"],
    join(logs, "kube-scheduler.log"),
  );
}

/** A kubeconfig for one user: a client certificate, or a token. */
export function clientKubeconfig(
  server: string,
  caPem: string,
  user: { cert: string; key: string } | string,
): string {
  return stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [
      {
        name: "testbed",
        cluster: { server, "certificate-authority-data": Buffer.from(caPem).toString("base64") },
      },
    ],
    users: [
      {
        name: "user",
        user:
          typeof user === "string"
            ? { token: user }
            : {
                "client-certificate-data": Buffer.from(user.cert).toString("base64"),
                "client-key-data": Buffer.from(user.key).toString("base64"),
              },
      },
    ],
    contexts: [{ name: "testbed", context: { cluster: "testbed", user: "user" } }],
    "current-context": "testbed",
  });
}
