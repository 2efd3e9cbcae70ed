/**
 * Validates a parsed configuration document: every error at once, each naming its field path, the bad
 * value and what is allowed. Returns the effective configuration (defaults filled, zero durations replaced
 * by their defaults) and warnings (unknown fields, settings that have no effect). The schema (schema.ts)
 * checks the structure; the rules relating fields (rules.ts, with files.ts for files on disk) then run on
 * every part that has the right shape (normalize.ts).
 */
import * as v from "valibot";
import { SvcError } from "../../lib/errors.ts";
import { documentOf, partsOf } from "./normalize.ts";
import {
  admissionConfig,
  keylogRules,
  listenerConfigs,
  metricsAddress,
  notaryDatabase,
  reporter,
  requiredSections,
  workloadApi,
} from "./rules.ts";
import { Config } from "./schema.ts";
import type { ProxyConfig } from "./types.ts";
import { unknownFields } from "./unknown-fields.ts";
import { notaryWitnesses, witnessConfig } from "./witness-rules.ts";

/** Every problem, and every warning with them: a warning can be the cause of a problem (a misspelt key). */
export class ConfigError extends SvcError {
  constructor(
    readonly problems: string[],
    readonly warnings: string[] = [],
  ) {
    const counted = (n: number, what: string) => `${n} ${what}${n === 1 ? "" : "s"}`;
    super(
      "usage",
      `invalid configuration (${counted(problems.length, "problem")}${warnings.length > 0 ? `, ${counted(warnings.length, "warning")}` : ""}):\n${[
        ...problems.map((p) => `  ${p}`),
        ...warnings.map((w) => `  warning: ${w}`),
      ].join("\n")}`,
    );
  }
}

function pathOf(issue: v.BaseIssue<unknown>): string {
  return (issue.path ?? [])
    .map((p) => (typeof p.key === "number" ? `[${p.key}]` : `.${String(p.key)}`))
    .join("")
    .replace(/^\./, "");
}

// A missing key is reported by its parent object with a generic message; say what it is.
const issueText = (i: v.BaseIssue<unknown>) =>
  `${pathOf(i) || "(document)"}: ${i.message.startsWith("Invalid key:") ? "required field is missing" : i.message}`;

export function validateConfig(raw: unknown): { config: ProxyConfig; warnings: string[] } {
  const parsed = v.safeParse(Config, raw, { abortEarly: false });
  const problems: string[] = parsed.success ? [] : parsed.issues.map(issueText);
  const warnings = unknownFields(Config, raw).map((p) => `${p}: unknown field, ignored (check its spelling)`);
  const problem = reporter(problems);
  const parts = partsOf(parsed, raw);
  const doc = documentOf(raw);
  const listed = Array.isArray(doc.listeners) ? doc.listeners.length : 0;

  const workloadApiAddress = parts.spiffe ? workloadApi(parts.spiffe, problem) : "";
  const metricsAddr =
    parts.metricsAddr === undefined ? undefined : metricsAddress(parts.metricsAddr, problem);
  if (parts.keylog) keylogRules(parts.keylog, listed, problem, warnings);
  const notaryEnabled = parts.notary?.enable ?? false;
  const database = parts.notary ? notaryDatabase(parts.notary.database, notaryEnabled, problem) : undefined;
  const pushes = parts.notary
    ? notaryWitnesses(parts.notary, problem)
    : { witnesses: [], pushIntervalMs: 10_000 };
  const witness = parts.witness ? witnessConfig(parts.witness, problem) : undefined;
  const roles = { notary: notaryEnabled, witness: witness !== undefined };
  requiredSections(doc, listed, roles, problem);
  const admission = admissionConfig(parts.admission, doc.admission, problem);
  const listeners = listenerConfigs(parts.listeners, roles, problems, warnings);

  if (!parsed.success || problems.length > 0) throw new ConfigError(problems, warnings);
  return {
    config: {
      workloadApi: workloadApiAddress,
      admission,
      metricsAddr,
      keylog: parts.keylog || undefined,
      notary: { enable: notaryEnabled, database, ...pushes },
      witness,
      listeners,
      // The effective configuration shows the address in force: an empty metricsAddr means the default.
      effective: { ...parsed.output, metricsAddr: parts.metricsAddr ?? parsed.output.metricsAddr },
    },
    warnings,
  };
}
