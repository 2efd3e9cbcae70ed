/**
 * ~/.svc/config.yaml (docs/svc-config.md). Context fields are upper case by convention (US, TS, ALPHA);
 * values are kept as written and compared case-insensitively.
 */
import * as v from "valibot";
import { MAX_LABEL_VALUE, PART_SYNTAX } from "../kube/mls.ts";

const text = (what: string) =>
  v.pipe(v.string(`${what} must be a string`), v.nonEmpty(`${what} must not be empty`));

/**
 * What each part of a compartment may be: the grammar the cluster's rules read (lib/kube/mls.ts
 * PART_SYNTAX). One rule for the file, `svc context create` and the SVC_* variables. A compartment is at
 * most as long as leaves its label (`US-TS-…`) within a label value's 63 characters.
 */
const MAX_COMPARTMENT = MAX_LABEL_VALUE - "USA-TS-".length;
const PARTS = {
  country: { syntax: PART_SYNTAX.country, allowed: "2 or 3 letters, such as US, UK, AUS" },
  sensitivity: { syntax: PART_SYNTAX.sensitivity, allowed: "U, C, S or TS" },
  compartment: {
    syntax: PART_SYNTAX.compartment,
    allowed: `letters and digits, with _ . - between them, at most ${MAX_COMPARTMENT} characters`,
  },
} as const;
export type Part = keyof typeof PARTS;
const PATTERNS = Object.fromEntries(
  Object.entries(PARTS).map(([part, { syntax }]) => [part, new RegExp(`^(?:${syntax})$`)]),
) as Record<Part, RegExp>;

/** Why `value` cannot be that part of a compartment, or undefined when it can. */
export function partProblem(part: Part, value: string): string | undefined {
  const fits = PATTERNS[part].test(value) && (part !== "compartment" || value.length <= MAX_COMPARTMENT);
  return fits ? undefined : `${JSON.stringify(value)} is not a ${part} (allowed: ${PARTS[part].allowed})`;
}

const part = (name: Part) =>
  v.pipe(
    text(name),
    v.check(
      (x) => partProblem(name, x) === undefined,
      (i) => partProblem(name, String(i.input)) as string,
    ),
  );

export const Context = v.object({
  country: part("country"),
  sensitivity: part("sensitivity"),
  compartment: part("compartment"),
  kubeContext: text("kubeContext"),
  namespace: v.optional(v.string("namespace must be a string")),
});

export const AUDIT_LEVELS = ["debug", "info", "warn", "error"] as const;

export const AuditLogSettings = v.object({
  enabled: v.optional(v.boolean("auditLog.enabled must be true or false"), false),
  path: v.optional(v.string("auditLog.path must be a string"), "~/.svc/audit.log"),
  level: v.optional(
    v.picklist(AUDIT_LEVELS, `auditLog.level must be one of ${AUDIT_LEVELS.join(", ")}`),
    "info",
  ),
});

const isMapping = (x: unknown): x is Record<string, unknown> =>
  typeof x === "object" && x !== null && !Array.isArray(x);

/** An object without a prototype: looking up `toString` or `constructor` finds only a context of that name. */
function byName(contexts: Map<string, CompartmentContext>): Record<string, CompartmentContext> {
  const out: Record<string, CompartmentContext> = Object.create(null);
  for (const [name, context] of contexts) out[name] = context;
  return out;
}

/**
 * Context names are data: valibot's record skips `__proto__`, `constructor` and `prototype` (unchecked and
 * dropped), so the map is checked as a Map of name to context, then kept in an object without prototype.
 */
const Contexts = v.pipe(
  v.custom<Record<string, unknown>>(isMapping, "contexts must be a map of name to context"),
  v.transform((m) => new Map(Object.entries(m))),
  v.map(v.string(), Context),
  v.transform(byName),
);

export const SvcConfig = v.object({
  currentContext: v.optional(v.string("currentContext must be a string"), ""),
  contexts: v.optional(Contexts, () => ({})),
  defaultUserGroups: v.optional(v.array(v.string(), "defaultUserGroups must be a list of strings"), [
    "system:authenticated",
  ]),
  kubeconfig: v.optional(v.string("kubeconfig must be a string")),
  requireExplicitContextSwitch: v.optional(
    v.boolean("requireExplicitContextSwitch must be true or false"),
    false,
  ),
  auditLog: v.optional(AuditLogSettings, {}),
});

export type SvcConfig = v.InferOutput<typeof SvcConfig>;
export type CompartmentContext = v.InferOutput<typeof Context>;

/** The keys the file may have at each level; any other is warned about (a typo would be ignored silently). */
export const KNOWN_KEYS = {
  top: Object.keys(SvcConfig.entries),
  context: Object.keys(Context.entries),
  auditLog: Object.keys(AuditLogSettings.entries),
};

/**
 * The context of that name, if the configuration has one. Own entries only: a configuration built in code
 * is a plain object, where `toString` or `__proto__` would find Object's.
 */
export function findContext(
  config: Pick<SvcConfig, "contexts">,
  name: string,
): CompartmentContext | undefined {
  return Object.hasOwn(config.contexts, name) ? config.contexts[name] : undefined;
}

/** The naming convention of docs/svc-config.md: `<country>-<sensitivity>-<compartment>` in lower case. */
export function contextName(c: Pick<CompartmentContext, "country" | "sensitivity" | "compartment">): string {
  return `${c.country}-${c.sensitivity}-${c.compartment}`.toLowerCase();
}

/**
 * The compartment label value (docs/svc-config.md, "svc apply"): `<COUNTRY>-<SENSITIVITY>-<COMPARTMENT>`
 * upper case.
 */
export function compartmentLabel(
  c: Pick<CompartmentContext, "country" | "sensitivity" | "compartment">,
): string {
  return `${c.country}-${c.sensitivity}-${c.compartment}`.toUpperCase();
}
