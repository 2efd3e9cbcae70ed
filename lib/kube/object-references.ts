/**
 * What an object names by API group, kind and name, beyond what a pod names (pod-references.ts): the
 * workload a HorizontalPodAutoscaler scales, the Services, Secrets and other backends an Ingress routes to,
 * the volume a claim binds by name and the source it is cloned from, the object an Event is about, the
 * service accounts a RoleBinding grants its role to, and the priority class a pod or pod template asks
 * for. A controller acts on each for the object's writer; the
 * admission webhook compares each one's compartment with the naming object's (docs/admission.md). Pure:
 * no lookups here. Every field comes from the request and is checked for its type where it is read.
 */
import { get, isObj, list, str } from "./fields.ts";
import { volumeVia } from "./pod-references.ts";
import { serviceAccountOf } from "./service-account.ts";
export interface NamedRef {
  /** The API group ("" for the core group). */
  group: string;
  kind: string;
  name: string;
  /** Where the object names it, for the refusal's text. */
  via: string;
  /** Set when the reference names another namespace (an Event's involved object, a cross-namespace source). */
  namespace?: string;
}

/** "apps/v1" → "apps"; "v1" → "". */
export const groupOf = (apiVersion: string): string =>
  apiVersion.includes("/") ? (apiVersion.split("/")[0] as string) : "";

/** The kinds whose writes name other objects here, by "group/resource". */
export const NAMING_RESOURCES = new Set([
  "autoscaling/horizontalpodautoscalers",
  "networking.k8s.io/ingresses",
  "/persistentvolumeclaims",
  "/events",
  "events.k8s.io/events",
  "rbac.authorization.k8s.io/rolebindings",
]);

/**
 * The service accounts a RoleBinding grants its role to, as RBAC matches them: subjects of kind
 * ServiceAccount (without a namespace: the binding's own, `namespace`), and subjects of kind User named
 * `system:serviceaccount:<namespace>:<name>`, which is how a service account authenticates.
 */
export function boundAccounts(binding: unknown, namespace: string): { name: string; namespace: string }[] {
  return list(get(binding, "subjects")).flatMap((s) => {
    const name = str(get(s, "name"));
    if (!name) return [];
    if (get(s, "kind") === "ServiceAccount")
      return [{ name, namespace: str(get(s, "namespace")) ?? namespace }];
    const account = get(s, "kind") === "User" ? serviceAccountOf(name) : undefined;
    return account ? [account] : [];
  });
}

/** The claim templates an object holds: a stateful set's, and the ephemeral volumes of its pod spec. */
export function claimTemplates(object: unknown, podSpec: unknown): { spec: unknown; via: string }[] {
  const found = list(get(object, "spec", "volumeClaimTemplates")).map((t, i) => ({
    spec: get(t, "spec"),
    via: `spec.volumeClaimTemplates[${i}]`,
  }));
  for (const v of list(get(podSpec, "volumes"))) {
    const template = get(v, "ephemeral", "volumeClaimTemplate");
    if (template !== undefined)
      found.push({
        spec: get(template, "spec"),
        via: volumeVia(v),
      });
  }
  return found;
}

/**
 * Everything an object names for a controller to act on: what namedBy reads, the priority class of its
 * pod spec, and what its claim templates name (the claims they become are created by the control plane).
 */
export function namesOf(
  group: string,
  resource: string,
  object: unknown,
  podSpec: unknown,
  namespace: string,
): NamedRef[] {
  const refs = namedBy(group, resource, object, namespace);
  const priority = priorityClassOf(podSpec);
  if (priority) refs.push(priority);
  for (const t of claimTemplates(object, podSpec))
    for (const r of namedBy("", "persistentvolumeclaims", { spec: t.spec }, namespace))
      refs.push({ ...r, via: `${t.via} ${r.via}` });
  return refs;
}

/** What an object of `group/resource` in `namespace` names by kind and name. */
function namedBy(group: string, resource: string, object: unknown, namespace: string): NamedRef[] {
  const refs: NamedRef[] = [];
  const add = (ref: Partial<NamedRef> & { via: string }) => {
    // A reference without a kind or name names nothing the API server accepts; a kind or name that is not
    // text is named as it is, and no lookup finds it.
    if (ref.kind === undefined && ref.name === undefined) return;
    refs.push({
      group: typeof ref.group === "string" ? ref.group : "",
      kind: String(ref.kind),
      name: String(ref.name),
      via: ref.via,
      ...(ref.namespace !== undefined ? { namespace: ref.namespace } : {}),
    });
  };
  /** An {apiVersion, kind, name, namespace} reference (owner style). */
  const versioned = (r: unknown, via: string) => {
    if (!isObj(r)) return;
    const apiVersion = str(r.apiVersion) ?? "";
    const namespace = str(r.namespace);
    add({ group: groupOf(apiVersion), kind: r.kind as string, name: r.name as string, via, namespace });
  };
  /** A TypedLocalObjectReference ({apiGroup, kind, name}; no apiGroup is the core group). */
  const typed = (r: unknown, via: string) => {
    if (!isObj(r)) return;
    add({
      group: str(r.apiGroup) ?? "",
      kind: r.kind as string,
      name: r.name as string,
      via,
      namespace: str(r.namespace),
    });
  };
  const backend = (b: unknown, via: string) => {
    const service = str(get(b, "service", "name"));
    if (service) add({ group: "", kind: "Service", name: service, via });
    typed(get(b, "resource"), via);
  };

  switch (`${group}/${resource}`) {
    case "autoscaling/horizontalpodautoscalers":
      versioned(get(object, "spec", "scaleTargetRef"), "spec.scaleTargetRef");
      break;
    case "networking.k8s.io/ingresses":
      backend(get(object, "spec", "defaultBackend"), "spec.defaultBackend");
      for (const [i, rule] of list(get(object, "spec", "rules")).entries())
        for (const path of list(get(rule, "http", "paths")))
          backend(get(path, "backend"), `spec.rules[${i}] backend`);
      for (const tls of list(get(object, "spec", "tls"))) {
        const secret = str(get(tls, "secretName"));
        if (secret) add({ group: "", kind: "Secret", name: secret, via: "spec.tls secretName" });
      }
      break;
    case "/persistentvolumeclaims": {
      const volume = str(get(object, "spec", "volumeName"));
      if (volume) add({ group: "", kind: "PersistentVolume", name: volume, via: "spec.volumeName" });
      typed(get(object, "spec", "dataSource"), "spec.dataSource");
      typed(get(object, "spec", "dataSourceRef"), "spec.dataSourceRef");
      break;
    }
    case "/events":
      versioned(get(object, "involvedObject"), "involvedObject");
      break;
    case "events.k8s.io/events":
      versioned(get(object, "regarding"), "regarding");
      versioned(get(object, "related"), "related");
      break;
    case "rbac.authorization.k8s.io/rolebindings":
      for (const subject of boundAccounts(object, namespace))
        add({ group: "", kind: "ServiceAccount", ...subject, via: "subjects" });
      break;
  }
  // The same source named twice (dataSource and dataSourceRef agree) is decided once.
  const seen = new Set<string>();
  return refs.filter((r) => {
    const key = JSON.stringify([r.group, r.kind, r.name, r.namespace]);
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

/**
 * Why a priority class harms no compartment, whatever its marks; undefined when it may. One that never
 * preempts only queues; the global default is the administrators' choice for every pod that names none
 * (the API server writes its name into them).
 */
export function priorityClassHarmless(priorityClass: unknown): string | undefined {
  if (get(priorityClass, "preemptionPolicy") === "Never") return "never preempts";
  if (get(priorityClass, "globalDefault") === true) return "the cluster's default";
  return undefined;
}

/** The priority class a pod spec asks for: the scheduler preempts lower pods for it. */
function priorityClassOf(podSpec: unknown): NamedRef | undefined {
  const name = str(get(podSpec, "priorityClassName"));
  return name
    ? { group: "scheduling.k8s.io", kind: "PriorityClass", name, via: "priorityClassName" }
    : undefined;
}
