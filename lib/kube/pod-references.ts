import { get, isObj, list, str } from "./fields.ts";
import type { CachedKind } from "./marks-cache.ts";

/** How a refusal names a volume of a pod spec: by its name, quoted and cut. */
export const volumeVia = (v: unknown) => `volume ${JSON.stringify(String(get(v, "name")).slice(0, 63))}`;

/**
 * What a pod, or a pod template in any workload, refers to by name in its own namespace: Secrets,
 * ConfigMaps, its ServiceAccount and PersistentVolumeClaims — through volumes (projected sources and
 * every in-tree or CSI volume's secret reference included), env and envFrom of every container, init
 * container and ephemeral container, and imagePullSecrets. The admission webhook compares each one's
 * compartment with the pod's (docs/admission.md). Pure: no lookups here.
 */
export interface Reference {
  kind: Exclude<CachedKind, "pods" | "services">;
  name: string;
  /** Where in the spec, for the refusal's text. */
  via: string;
}

/** A pod spec with the metadata its pods carry, and where it is in the object. */
export interface PodSpecAt {
  place: string;
  meta: unknown;
  spec: unknown;
}

/** Where each kind the webhook is sent keeps its pod spec (the path to the template holding it). */
const TEMPLATE_AT: Record<string, string[]> = {
  pods: [],
  deployments: ["spec", "template"],
  replicasets: ["spec", "template"],
  statefulsets: ["spec", "template"],
  daemonsets: ["spec", "template"],
  jobs: ["spec", "template"],
  replicationcontrollers: ["spec", "template"],
  podtemplates: ["template"],
  cronjobs: ["spec", "jobTemplate", "spec", "template"],
  controllerrevisions: ["data", "spec", "template"],
};

export function podSpecOf(resource: string, object: unknown): PodSpecAt | undefined {
  const path = Object.hasOwn(TEMPLATE_AT, resource) ? TEMPLATE_AT[resource] : undefined;
  if (!path) return undefined;
  const holder = get(object, ...path);
  if (!isObj(holder)) return undefined;
  return { place: path.join("."), meta: holder.metadata, spec: holder.spec };
}

export function referencesOf(spec: unknown): Reference[] {
  const found = new Map<string, Reference>();
  const add = (kind: Reference["kind"], name: unknown, via: string) => {
    const n = str(name);
    if (n && !found.has(`${kind}/${n}`)) found.set(`${kind}/${n}`, { kind, name: n, via });
  };
  // The API server fills in "default" before validating admission runs; a template may leave it out.
  add(
    "serviceaccounts",
    str(get(spec, "serviceAccountName")) ?? str(get(spec, "serviceAccount")) ?? "default",
    "serviceAccountName",
  );
  for (const s of list(get(spec, "imagePullSecrets"))) add("secrets", get(s, "name"), "imagePullSecrets");
  for (const v of list(get(spec, "volumes"))) {
    const via = volumeVia(v);
    add("secrets", get(v, "secret", "secretName"), via);
    add("configmaps", get(v, "configMap", "name"), via);
    add("persistentvolumeclaims", get(v, "persistentVolumeClaim", "claimName"), via);
    for (const source of list(get(v, "projected", "sources"))) {
      add("secrets", get(source, "secret", "name"), via);
      add("configmaps", get(source, "configMap", "name"), via);
    }
    // The other volume sources that name a Secret: csi (nodePublishSecretRef), azureFile (secretName),
    // cephfs, cinder, flexVolume, iscsi, rbd, scaleIO and storageos (secretRef).
    if (isObj(v))
      for (const [key, source] of Object.entries(v)) {
        if (key === "secret" || key === "projected") continue;
        add("secrets", get(source, "secretRef", "name"), via);
        add("secrets", get(source, "nodePublishSecretRef", "name"), via);
        add("secrets", get(source, "secretName"), via);
      }
  }
  for (const group of ["initContainers", "containers", "ephemeralContainers"])
    for (const c of list(get(spec, group))) {
      const via = `container ${JSON.stringify(String(get(c, "name")).slice(0, 63))}`;
      for (const e of list(get(c, "env"))) {
        add("secrets", get(e, "valueFrom", "secretKeyRef", "name"), `${via} env`);
        add("configmaps", get(e, "valueFrom", "configMapKeyRef", "name"), `${via} env`);
      }
      for (const e of list(get(c, "envFrom"))) {
        add("secrets", get(e, "secretRef", "name"), `${via} envFrom`);
        add("configmaps", get(e, "configMapRef", "name"), `${via} envFrom`);
      }
    }
  return [...found.values()];
}

/**
 * The volume types whose data the cluster's marks can tell: what the pod's own namespace holds (Secrets,
 * ConfigMaps, claims, the pod itself) and what lives and dies with the pod; CSI drivers, as Pod Security's
 * restricted level allows them. The same list as that level's.
 */
const MARKED_VOLUME_TYPES = new Set([
  "configMap",
  "csi",
  "downwardAPI",
  "emptyDir",
  "ephemeral",
  "persistentVolumeClaim",
  "projected",
  "secret",
]);

/**
 * The volumes of a pod spec of any other type (`nfs`, `iscsi`, `rbd`, `hostPath` …): each reaches storage
 * by an address written in the pod, which no compartment mark can tell.
 */
export function unmarkedStorage(spec: unknown): { via: string; type: string }[] {
  return list(get(spec, "volumes")).flatMap((v) =>
    isObj(v)
      ? Object.keys(v)
          .filter((k) => k !== "name" && !MARKED_VOLUME_TYPES.has(k))
          .map((type) => ({ via: volumeVia(v), type }))
      : [],
  );
}
