/**
 * Cluster-side clearances (docs/admission.md): what a requester may touch, read from the groups the
 * cluster authenticated them with — `svc:country:<c>`, `svc:sensitivity:<s>`, `svc:compartment:<c>`, lower
 * case. A compartment label `<COUNTRY>-<SENSITIVITY>-<COMPARTMENT>` is cleared when the requester holds its
 * country, its compartment, and its sensitivity or a higher one (U < C < S < TS). The same rule is written in
 * CEL in deploy/admission/base/policy.yaml; tests/e2e/admission.e2e.test.ts runs one table of labels
 * through both and through this function.
 */
import {
  COMPARTMENT_ANNOTATION,
  COMPARTMENT_LABEL,
  type Compartment,
  LEVEL_ANNOTATION,
  type Marks,
  PART_SYNTAX,
} from "./mls.ts";

export const SENSITIVITY_ORDER = ["u", "c", "s", "ts"] as const;

export interface Clearances {
  countries: string[];
  /** The highest sensitivity held, as an index into SENSITIVITY_ORDER; -1 when none. */
  sensitivity: number;
  compartments: string[];
}

const { country: COUNTRY, sensitivity: SENSITIVITY, compartment: COMPARTMENT } = PART_SYNTAX;
const LABEL = new RegExp(`^(${COUNTRY})-(${SENSITIVITY})-(${COMPARTMENT})$`);
const LEVEL_NOTE = new RegExp(`^(${COUNTRY}):(${SENSITIVITY})$`);
const COMPARTMENT_NOTE = new RegExp(`^(${COUNTRY}):(${COMPARTMENT})$`);

/** `US-TS-ALPHA` → its parts (lower case); undefined when the value does not have that shape. */
export function parseCompartmentLabel(value: string): Compartment | undefined {
  const m = LABEL.exec(value);
  if (!m) return undefined;
  return {
    country: (m[1] as string).toLowerCase(),
    sensitivity: (m[2] as string).toLowerCase(),
    compartment: (m[3] as string).toLowerCase(),
  };
}

export function clearancesOf(groups: readonly string[]): Clearances {
  const c: Clearances = { countries: [], sensitivity: -1, compartments: [] };
  for (const g of groups) {
    const [prefix, kind, value, extra] = g.split(":");
    if (prefix !== "svc" || !value || extra !== undefined) continue;
    if (kind === "country") c.countries.push(value);
    else if (kind === "compartment") c.compartments.push(value);
    else if (kind === "sensitivity") {
      const level = (SENSITIVITY_ORDER as readonly string[]).indexOf(value);
      if (level > c.sensitivity) c.sensitivity = level;
    }
  }
  return c;
}

/**
 * How the cluster's compartment webhook grants the question "get compartmentclearances.svc.dev" (which
 * the admission policy, and `svc identity`, ask for a service account): the reason of an allowed answer is
 * this prefix and the clearance groups the account speaks for, space-separated (docs/admission.md,
 * "Identities").
 */
export const SPEAKS_FOR = "svc-compartments speaks for: ";

/**
 * The two permissions of svc's own API group the cluster is asked about (docs/admission.md): overriding a
 * compartment refusal (`svc --force`, and the webhook's override), and reading a service account's
 * clearances.
 */
export const OVERRIDE_PERMISSION = {
  group: "svc.dev",
  resource: "compartmentoverrides",
  verb: "force",
} as const;
export const CLEARANCE_PERMISSION = {
  group: "svc.dev",
  resource: "compartmentclearances",
  verb: "get",
} as const;

/** The groups an allowed clearance answer's reason names; undefined when the reason has another shape. */
export function spokenGroups(reason: string): string[] | undefined {
  if (!reason.startsWith(SPEAKS_FOR)) return undefined;
  return reason.slice(SPEAKS_FOR.length).split(" ");
}

/**
 * The MLS annotations (docs/svc-config.md, "svc apply"), each naming two of the three parts:
 * `mls.svc.dev/level` `<country>:<sensitivity>` and `mls.svc.dev/compartment` `<country>:<compartment>`;
 * undefined when the value has another shape.
 */
function parseLevelNote(value: string): Partial<Compartment> | undefined {
  const m = LEVEL_NOTE.exec(value);
  return m
    ? { country: (m[1] as string).toLowerCase(), sensitivity: (m[2] as string).toLowerCase() }
    : undefined;
}

function parseCompartmentNote(value: string): Partial<Compartment> | undefined {
  const m = COMPARTMENT_NOTE.exec(value);
  return m
    ? { country: (m[1] as string).toLowerCase(), compartment: (m[2] as string).toLowerCase() }
    : undefined;
}

/** Why `c` is not cleared for `target` (each missing part named; parts `target` lacks are not asked for). */
export function missingClearances(c: Clearances, target: Partial<Compartment>): string[] {
  const missing: string[] = [];
  if (target.country !== undefined && !c.countries.includes(target.country))
    missing.push(`country ${target.country}`);
  if (
    target.sensitivity !== undefined &&
    c.sensitivity < (SENSITIVITY_ORDER as readonly string[]).indexOf(target.sensitivity)
  )
    missing.push(`sensitivity ${target.sensitivity}`);
  if (target.compartment !== undefined && !c.compartments.includes(target.compartment))
    missing.push(`compartment ${target.compartment}`);
  return missing;
}

/** "compartments alpha, bravo; countries us; sensitivity up to ts" — the requester's side of a message. */
export function describeClearances(c: Clearances): string {
  const list = (xs: string[]) =>
    xs.length === 0
      ? "none"
      : xs.length > 10
        ? `${xs.slice(0, 10).join(", ")} and ${xs.length - 10} more`
        : xs.join(", ");
  const level = c.sensitivity >= 0 ? `up to ${SENSITIVITY_ORDER[c.sensitivity]}` : "none";
  return `compartments ${list(c.compartments)}; countries ${list(c.countries)}; sensitivity ${level}`;
}

/**
 * What an object's marks (its label and the two annotations) say, read as one compartment: none, one
 * compartment (the parts its marks name; the label names all three), or unreadable — a mark of another
 * shape, or marks that disagree (a label of ALPHA with an annotation naming bravo). Unreadable is refused
 * wherever it matters: the webhook cannot tell what it is checking.
 */
export type MarkedAs =
  | { kind: "none" }
  | { kind: "marked"; parts: Partial<Compartment>; shown: string }
  | { kind: "unreadable"; why: string };

const MARK_READERS: [keyof Marks, string, (v: string) => Partial<Compartment> | undefined, string][] = [
  ["compartment", COMPARTMENT_LABEL, parseCompartmentLabel, "<COUNTRY>-<SENSITIVITY>-<COMPARTMENT>"],
  ["level", LEVEL_ANNOTATION, parseLevelNote, "<country>:<sensitivity>"],
  ["compartmentNote", COMPARTMENT_ANNOTATION, parseCompartmentNote, "<country>:<compartment>"],
];

const cut = (v: string) => (v.length > 100 ? `${v.slice(0, 100)}…` : v);

export function compartmentOf(marks: Marks): MarkedAs {
  const parts: Partial<Compartment> = {};
  const values: string[] = [];
  for (const [field, key, parse, shape] of MARK_READERS) {
    const value = marks[field];
    if (value === undefined) continue;
    const read = parse(value);
    if (!read)
      return {
        kind: "unreadable",
        why: `${key}=${JSON.stringify(cut(value))} is not ${shape} (sensitivity TS, S, C or U)`,
      };
    for (const part of ["country", "sensitivity", "compartment"] as const) {
      const v = read[part];
      if (v === undefined) continue;
      if (parts[part] !== undefined && parts[part] !== v)
        return {
          kind: "unreadable",
          why: `its marks name two ${part === "country" ? "countries" : `${part}s`} (${parts[part]}, ${v})`,
        };
      parts[part] = v;
    }
    values.push(field === "compartment" ? value.toUpperCase() : value);
  }
  if (values.length === 0) return { kind: "none" };
  // The label names the compartment whole; without it, the annotations as written.
  return {
    kind: "marked",
    parts,
    shown: marks.compartment !== undefined ? (values[0] as string) : values.join(", "),
  };
}

/** The clearances a compartment context stands for: its country, its compartment, its sensitivity and below. */
export function contextClearances(c: {
  country: string;
  sensitivity: string;
  compartment: string;
}): Clearances {
  return {
    countries: [c.country.toLowerCase()],
    sensitivity: (SENSITIVITY_ORDER as readonly string[]).indexOf(c.sensitivity.toLowerCase()),
    compartments: [c.compartment.toLowerCase()],
  };
}

/**
 * The one clearance rule, for svc's guards (with the clearances of the current context) and for the
 * cluster's webhooks (with those of the requester's groups): an object whose marks cannot be read, or that
 * has none, is not cleared by any clearance; a marked one is when every part each of its marks names is
 * held (`marks`: the object's, and a workload's pod template's).
 */
export type Judgement =
  | { kind: "cleared"; shown: string }
  | { kind: "unlabeled" }
  | { kind: "unreadable"; why: string }
  | { kind: "not_cleared"; shown: string; missing: string[] };

export function judgeMarks(c: Clearances, marks: readonly Marks[]): Judgement {
  const read = marks.map(compartmentOf);
  for (const r of read) if (r.kind === "unreadable") return { kind: "unreadable", why: r.why };
  const marked = read.flatMap((r) => (r.kind === "marked" ? [r] : []));
  if (marked.length === 0) return { kind: "unlabeled" };
  const shown = [...new Set(marked.map((m) => m.shown))].join(", ");
  const missing = [...new Set(marked.flatMap((m) => missingClearances(c, m.parts)))];
  return missing.length === 0 ? { kind: "cleared", shown } : { kind: "not_cleared", shown, missing };
}

/** Two marked objects are of one compartment when their marks name the same parts. */
export const sameCompartment = (a: Partial<Compartment>, b: Partial<Compartment>): boolean =>
  a.country === b.country && a.sensitivity === b.sensitivity && a.compartment === b.compartment;
