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
export const MLS_ANNOTATION_PREFIX = "mls.svc.dev/";
export const LEVEL_ANNOTATION = `${MLS_ANNOTATION_PREFIX}level`;
export const COMPARTMENT_ANNOTATION = `${MLS_ANNOTATION_PREFIX}compartment`;

export const isMarkLabel = (key: string) => key === COMPARTMENT_LABEL;
export const isMarkAnnotation = (key: string) => key.startsWith(MLS_ANNOTATION_PREFIX);

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
