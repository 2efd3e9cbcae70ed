/**
 * The compartment marks (mls.ts), injected by `svc apply` and the commands that create objects into an
 * object and every pod template it holds, touching nothing else (docs/svc-config.md, "svc apply"). An
 * object already labelled for another compartment is refused, naming it. A workload's and a Service's
 * selector also gets the label (see pinSelector), so that it selects only its own compartment's objects.
 */
import { SvcError } from "../errors.ts";
import { isObj, type Obj } from "./fields.ts";
import { COMPARTMENT_ANNOTATION, COMPARTMENT_LABEL, type Compartment, LEVEL_ANNOTATION } from "./mls.ts";

export interface MlsMarks {
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

export function mlsMarks(c: Compartment): MlsMarks {
  const [country, sensitivity, compartment] = [c.country, c.sensitivity, c.compartment];
  return {
    labels: { [COMPARTMENT_LABEL]: `${country}-${sensitivity}-${compartment}`.toUpperCase() },
    annotations: {
      [LEVEL_ANNOTATION]: `${country}:${sensitivity}`.toLowerCase(),
      [COMPARTMENT_ANNOTATION]: `${country}:${compartment}`.toLowerCase(),
    },
  };
}

/** Where the pod templates of a kind live. */
const TEMPLATE_PATHS: Record<string, string[][]> = {
  Deployment: [["spec", "template"]],
  ReplicaSet: [["spec", "template"]],
  StatefulSet: [["spec", "template"]],
  DaemonSet: [["spec", "template"]],
  Job: [["spec", "template"]],
  ReplicationController: [["spec", "template"]],
  CronJob: [
    ["spec", "jobTemplate"],
    ["spec", "jobTemplate", "spec", "template"],
  ],
  PodTemplate: [["template"]],
  ControllerRevision: [["data", "spec", "template"]],
};
/**
 * Any other kind (a custom resource) with a `spec.template` that has metadata: the cluster's policy reads
 * its marks there too. One without metadata is left alone (it may be no pod template at all).
 */
const OTHER_TEMPLATE_PATHS = [["spec", "template"]];

export function describeObject(o: Obj): string {
  const meta = isObj(o.metadata) ? o.metadata : {};
  const ns = typeof meta.namespace === "string" ? `${meta.namespace}/` : "";
  return `${String(o.kind ?? "object")} ${ns}${String(meta.name ?? meta.generateName ?? "(unnamed)")}`;
}

function mark(metaHolder: Obj, marks: MlsMarks, what: string): void {
  if (!isObj(metaHolder.metadata)) metaHolder.metadata = {};
  const meta = metaHolder.metadata as Obj;
  const labels = (isObj(meta.labels) ? meta.labels : {}) as Record<string, string>;
  const existing = labels[COMPARTMENT_LABEL];
  const want = marks.labels[COMPARTMENT_LABEL] as string;
  if (existing !== undefined && existing.toUpperCase() !== want)
    throw new SvcError(
      "usage",
      `${what} is labelled ${COMPARTMENT_LABEL}=${existing}, not the current compartment ${want}; switch context (svc context use) or remove the label`,
    );
  meta.labels = { ...labels, ...marks.labels };
  meta.annotations = { ...((isObj(meta.annotations) ? meta.annotations : {}) as Obj), ...marks.annotations };
}

/**
 * Every selector the cluster's policy wants pinned (docs/admission.md, "Selectors pin the compartment"):
 * the `spec.selector` map of a ReplicationController and a Service (one left out keeps the API server's
 * default, a ReplicationController's template labels, or selects nothing, a Service without a selector),
 * and otherwise `spec.selector.matchLabels` of any kind (workloads, PodDisruptionBudgets, claims, custom
 * resources) and `spec.podSelector.matchLabels` (NetworkPolicies). A Job's selector only when it sets
 * `manualSelector` (its generated selector is unique already). A NetworkPolicy's peers name the pods it
 * admits and are left as written.
 */
function pinSelector(o: Obj, label: string, what: string): void {
  const spec = isObj(o.spec) ? o.spec : undefined;
  if (!spec) return;
  const kind = String(o.kind);
  let selector: Obj;
  if (kind === "ReplicationController" || kind === "Service") {
    if (!isObj(spec.selector) || Object.keys(spec.selector).length === 0) return;
    selector = spec.selector;
  } else {
    const holder = isObj(spec.selector)
      ? spec.selector
      : isObj(spec.podSelector)
        ? spec.podSelector
        : undefined;
    if (!holder || (kind === "Job" && spec.manualSelector !== true)) return;
    if (!isObj(holder.matchLabels)) holder.matchLabels = {};
    selector = holder.matchLabels as Obj;
  }
  const existing = selector[COMPARTMENT_LABEL];
  if (existing !== undefined && String(existing).toUpperCase() !== label)
    throw new SvcError(
      "usage",
      `the selector of ${what} picks ${COMPARTMENT_LABEL}=${String(existing)}, not the current compartment ${label}; switch context (svc context use) or remove it from the selector`,
    );
  selector[COMPARTMENT_LABEL] = label;
}

/** Injects into one object (a `List` is walked item by item). Returns the same object, changed. */
export function injectMls(o: Obj, c: Compartment): Obj {
  const marks = mlsMarks(c);
  if (typeof o.kind === "string" && o.kind.endsWith("List") && Array.isArray(o.items)) {
    for (const item of o.items) if (isObj(item)) injectMls(item, c);
    return o;
  }
  const what = describeObject(o);
  mark(o, marks, what);
  pinSelector(o, marks.labels[COMPARTMENT_LABEL] as string, what);
  const kind = String(o.kind);
  const known = Object.hasOwn(TEMPLATE_PATHS, kind);
  for (const path of known ? (TEMPLATE_PATHS[kind] as string[][]) : OTHER_TEMPLATE_PATHS) {
    let node: unknown = o;
    for (const key of path) node = isObj(node) ? node[key] : undefined;
    if (isObj(node) && (known || isObj(node.metadata))) mark(node, marks, `the pod template of ${what}`);
  }
  return o;
}
