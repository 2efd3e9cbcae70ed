import * as v from "valibot";

/**
 * ~/.svc/config.yaml (specification 2.1). Context fields are upper case by convention (US, TS, ALPHA);
 * values are kept as written and compared case-insensitively.
 */
const text = (what: string) =>
  v.pipe(v.string(`${what} must be a string`), v.nonEmpty(`${what} must not be empty`));

export const Context = v.object({
  country: text("country"),
  sensitivity: text("sensitivity"),
  compartment: text("compartment"),
  kubeContext: text("kubeContext"),
  namespace: v.optional(v.string("namespace must be a string")),
});

export const AUDIT_LEVELS = ["debug", "info", "warn", "error"] as const;

export const SvcConfig = v.object({
  currentContext: v.optional(v.string("currentContext must be a string"), ""),
  contexts: v.optional(v.record(v.string(), Context, "contexts must be a map of name to context"), {}),
  defaultUserGroups: v.optional(v.array(v.string(), "defaultUserGroups must be a list of strings"), [
    "system:authenticated",
  ]),
  kubeconfig: v.optional(v.string("kubeconfig must be a string")),
  requireExplicitContextSwitch: v.optional(
    v.boolean("requireExplicitContextSwitch must be true or false"),
    false,
  ),
  auditLog: v.optional(
    v.object({
      enabled: v.optional(v.boolean("auditLog.enabled must be true or false"), false),
      path: v.optional(v.string("auditLog.path must be a string"), "~/.svc/audit.log"),
      level: v.optional(
        v.picklist(AUDIT_LEVELS, `auditLog.level must be one of ${AUDIT_LEVELS.join(", ")}`),
        "info",
      ),
    }),
    {},
  ),
});

export type SvcConfig = v.InferOutput<typeof SvcConfig>;
export type CompartmentContext = v.InferOutput<typeof Context>;

/** The naming convention of 2.1: `<country>-<sensitivity>-<compartment>` in lower case. */
export function contextName(c: Pick<CompartmentContext, "country" | "sensitivity" | "compartment">): string {
  return `${c.country}-${c.sensitivity}-${c.compartment}`.toLowerCase();
}

/** The compartment label value of 2.2: `<COUNTRY>-<SENSITIVITY>-<COMPARTMENT>` upper case. */
export function compartmentLabel(
  c: Pick<CompartmentContext, "country" | "sensitivity" | "compartment">,
): string {
  return `${c.country}-${c.sensitivity}-${c.compartment}`.toUpperCase();
}
