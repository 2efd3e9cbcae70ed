/**
 * The MLS vocabulary, in one place (docs/svc-config.md, "svc apply"; docs/admission.md): an object's
 * compartment marks are
 *   label      svc.io/compartment      <COUNTRY>-<SENSITIVITY>-<COMPARTMENT>
 *   annotation mls.svc.dev/level       <country>:<sensitivity>
 *   annotation mls.svc.dev/compartment <country>:<compartment>
 * svc writes them (inject.ts), reads them (marks.ts for writes, clearance.ts for the clearance rule), and
 * the webhook caches them (marks-cache.ts).
 */
export const COMPARTMENT_LABEL = "svc.io/compartment";
const MLS_ANNOTATION_PREFIX = "mls.svc.dev/";
export const LEVEL_ANNOTATION = `${MLS_ANNOTATION_PREFIX}level`;
export const COMPARTMENT_ANNOTATION = `${MLS_ANNOTATION_PREFIX}compartment`;

export const isMarkLabel = (key: string) => key === COMPARTMENT_LABEL;
export const isMarkAnnotation = (key: string) => key.startsWith(MLS_ANNOTATION_PREFIX);

/**
 * The grammar of each part, as regular expression source (any case is read as lower case): what a label
 * value can carry (letters, digits, and `_ . -` inside). The cluster's admission policy
 * (deploy/admission/base/policy.yaml) spells the same in its CEL; tests/unit/compartment-marks.test.ts
 * holds the two to each other.
 */
export const PART_SYNTAX = {
  country: "[A-Za-z]{2,3}",
  sensitivity: "TS|S|C|U|ts|s|c|u",
  compartment: "[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?",
} as const;

/** The longest label value Kubernetes takes: a compartment label `US-TS-…` must fit it. */
export const MAX_LABEL_VALUE = 63;

/**
 * The phrases of the cluster webhook's refusals (proxy/admission/) that svc reads back from kubectl's
 * errors (lookup.ts): one spelling for the writer and the reader.
 */
export const REFUSAL = {
  unreadable: "has compartment marks svc cannot read",
  foreign: "in another compartment",
  unlabeled: "without a compartment label",
} as const;

/** How svc ends a compartment refusal or warning: with the compartment the user works in (its label). */
export const inCompartment = (text: string, label: string): string =>
  `${text}; current compartment: ${label}`;

/** A compartment's three parts. */
export interface Compartment {
  country: string;
  sensitivity: string;
  compartment: string;
}

/** An object's compartment marks: its label and the two annotations, each undefined when absent. */
export interface Marks {
  /** The `svc.io/compartment` label. */
  compartment: string | undefined;
  /** `mls.svc.dev/level`. */
  level: string | undefined;
  /** `mls.svc.dev/compartment`. */
  compartmentNote: string | undefined;
}

/** A value that is not a string (from a crafted review) is kept as its JSON, which no mark parser reads. */
const text = (v: unknown) => (v === undefined || typeof v === "string" ? v : JSON.stringify(v));
const field = (map: unknown, key: string): unknown =>
  map !== null && typeof map === "object" && Object.hasOwn(map, key)
    ? (map as Record<string, unknown>)[key]
    : undefined;

/** The marks in an object's metadata, whatever shape the metadata has. */
export const marksOfMeta = (meta: unknown): Marks => ({
  compartment: text(field(field(meta, "labels"), COMPARTMENT_LABEL)),
  level: text(field(field(meta, "annotations"), LEVEL_ANNOTATION)),
  compartmentNote: text(field(field(meta, "annotations"), COMPARTMENT_ANNOTATION)),
});
