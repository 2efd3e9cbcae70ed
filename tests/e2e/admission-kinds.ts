/**
 * One object of every namespaced kind the standard `edit` and `admin` roles let a user write, as the
 * threat-model table of docs/admission.md lists them: a minimal manifest marked for a compartment, its
 * selectors pinned, naming only objects of that compartment (`ref`: the name of a Deployment and a
 * Service of the compartment, which must exist for the kinds that name them; the Event is about it, in
 * namespace shared). tests/e2e/admission-default
 * reads the roles on the test bed and fails for a kind they grant that has no row here.
 */
const PIN = "svc.io/compartment";

type Manifest = (compartment: string, name: string, ref: string) => Record<string, unknown>;

const meta = (name: string, c: string, extra: Record<string, unknown> = {}) => ({
  name,
  labels: { [PIN]: c },
  ...extra,
});
const podSpec = { containers: [{ name: "main", image: "busybox" }] };
const template = (c: string, app: string) => ({
  metadata: { labels: { app, [PIN]: c } },
  spec: podSpec,
});
const selector = (c: string, app: string) => ({ matchLabels: { app, [PIN]: c } });

/** By "group/resource" (the core group is ""). */
export const KINDS: Record<string, Manifest> = {
  "/configmaps": (c, name) => ({
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: meta(name, c),
    data: { a: "b" },
  }),
  "/secrets": (c, name) => ({
    apiVersion: "v1",
    kind: "Secret",
    metadata: meta(name, c),
    stringData: { a: "b" },
  }),
  "/serviceaccounts": (c, name) => ({ apiVersion: "v1", kind: "ServiceAccount", metadata: meta(name, c) }),
  "/services": (c, name) => ({
    apiVersion: "v1",
    kind: "Service",
    metadata: meta(name, c),
    spec: { selector: { app: name, [PIN]: c }, ports: [{ port: 80 }] },
  }),
  "/persistentvolumeclaims": (c, name) => ({
    apiVersion: "v1",
    kind: "PersistentVolumeClaim",
    metadata: meta(name, c),
    spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Mi" } } },
  }),
  "/pods": (c, name) => ({ apiVersion: "v1", kind: "Pod", metadata: meta(name, c), spec: podSpec }),
  "/replicationcontrollers": (c, name) => ({
    apiVersion: "v1",
    kind: "ReplicationController",
    metadata: meta(name, c),
    spec: { replicas: 0, selector: { app: name, [PIN]: c }, template: template(c, name) },
  }),
  "apps/deployments": (c, name) => ({
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: meta(name, c),
    spec: { replicas: 0, selector: selector(c, name), template: template(c, name) },
  }),
  "apps/replicasets": (c, name) => ({
    apiVersion: "apps/v1",
    kind: "ReplicaSet",
    metadata: meta(name, c),
    spec: { replicas: 0, selector: selector(c, name), template: template(c, name) },
  }),
  "apps/statefulsets": (c, name) => ({
    apiVersion: "apps/v1",
    kind: "StatefulSet",
    metadata: meta(name, c),
    spec: { replicas: 0, serviceName: name, selector: selector(c, name), template: template(c, name) },
  }),
  "apps/daemonsets": (c, name) => ({
    apiVersion: "apps/v1",
    kind: "DaemonSet",
    metadata: meta(name, c),
    spec: { selector: selector(c, name), template: template(c, name) },
  }),
  "batch/jobs": (c, name) => ({
    apiVersion: "batch/v1",
    kind: "Job",
    metadata: meta(name, c),
    spec: { suspend: true, template: { ...template(c, name), spec: { ...podSpec, restartPolicy: "Never" } } },
  }),
  "batch/cronjobs": (c, name) => ({
    apiVersion: "batch/v1",
    kind: "CronJob",
    metadata: meta(name, c),
    spec: {
      schedule: "0 0 1 1 *",
      suspend: true,
      jobTemplate: {
        metadata: { labels: { [PIN]: c } },
        spec: { template: { ...template(c, name), spec: { ...podSpec, restartPolicy: "Never" } } },
      },
    },
  }),
  "/events": (c, name, ref) => ({
    apiVersion: "v1",
    kind: "Event",
    metadata: meta(name, c),
    involvedObject: { apiVersion: "v1", kind: "Service", name: ref, namespace: "shared" },
    reason: "Test",
    message: "about the compartment's own Service",
    type: "Normal",
  }),
  "coordination.k8s.io/leases": (c, name) => ({
    apiVersion: "coordination.k8s.io/v1",
    kind: "Lease",
    metadata: meta(name, c),
    spec: { holderIdentity: name },
  }),
  "autoscaling/horizontalpodautoscalers": (c, name, ref) => ({
    apiVersion: "autoscaling/v2",
    kind: "HorizontalPodAutoscaler",
    metadata: meta(name, c),
    spec: { scaleTargetRef: { apiVersion: "apps/v1", kind: "Deployment", name: ref }, maxReplicas: 2 },
  }),
  "policy/poddisruptionbudgets": (c, name) => ({
    apiVersion: "policy/v1",
    kind: "PodDisruptionBudget",
    metadata: meta(name, c),
    spec: { maxUnavailable: 1, selector: selector(c, name) },
  }),
  "networking.k8s.io/ingresses": (c, name, ref) => ({
    apiVersion: "networking.k8s.io/v1",
    kind: "Ingress",
    metadata: meta(name, c),
    spec: { defaultBackend: { service: { name: ref, port: { number: 80 } } } },
  }),
  "networking.k8s.io/networkpolicies": (c, name) => ({
    apiVersion: "networking.k8s.io/v1",
    kind: "NetworkPolicy",
    metadata: meta(name, c),
    spec: {
      podSelector: { matchLabels: { [PIN]: c } },
      ingress: [{ from: [{ podSelector: { matchLabels: { [PIN]: c } } }] }],
    },
  }),
  "rbac.authorization.k8s.io/roles": (c, name) => ({
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "Role",
    metadata: meta(name, c),
    rules: [],
  }),
  "rbac.authorization.k8s.io/rolebindings": (c, name) => ({
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "RoleBinding",
    metadata: meta(name, c),
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "view" },
    subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "Group", name: "nobody" }],
  }),
};

/**
 * Namespaced kinds the roles grant that have no row above, each with its reason; the threat-model
 * table names them too.
 */
export const NOT_STORED: Record<string, string> = {
  "authorization.k8s.io/localsubjectaccessreviews": "a question about access, answered and never stored",
};
