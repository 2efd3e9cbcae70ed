/**
 * Go `flag` package conventions, which svc-proxy users know from ghostunnel and controller-runtime:
 * `-name value`, `-name=value`, `--name=value`; booleans as `-name` or `-name=false`.
 */
import { SvcError } from "../lib/errors.ts";

export interface FlagSpec {
  name: string;
  kind: "string" | "bool";
  usage: string;
  default?: string;
  /** Allowed values, listed in errors and help. */
  values?: string[];
}

export type FlagValues = Record<string, string | boolean | undefined>;

export function parseGoFlags(specs: readonly FlagSpec[], argv: readonly string[]): FlagValues {
  const byName = new Map(specs.map((s) => [s.name, s]));
  const out: FlagValues = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (!arg.startsWith("-") || arg === "-" || arg === "--") {
      throw new SvcError(
        "usage",
        `unexpected argument ${JSON.stringify(arg)}; svc-proxy takes only flags (see -help)`,
      );
    }
    const body = arg.replace(/^--?/, "");
    const eq = body.indexOf("=");
    const name = eq < 0 ? body : body.slice(0, eq);
    const spec = byName.get(name);
    if (!spec) throw new SvcError("usage", `flag provided but not defined: -${name} (see -help)`);
    let value: string | boolean;
    if (spec.kind === "bool") {
      const text = eq < 0 ? "true" : body.slice(eq + 1);
      if (!["true", "false", "1", "0"].includes(text)) {
        throw new SvcError(
          "usage",
          `invalid boolean value ${JSON.stringify(text)} for -${name} (allowed: true, false)`,
        );
      }
      value = text === "true" || text === "1";
    } else {
      if (eq >= 0) value = body.slice(eq + 1);
      else {
        const next = argv[++i];
        if (next === undefined) throw new SvcError("usage", `flag needs an argument: -${name}`);
        value = next;
      }
      if (spec.values && !spec.values.includes(value)) {
        throw new SvcError(
          "usage",
          `invalid value ${JSON.stringify(value)} for -${name} (allowed: ${spec.values.join(", ")})`,
        );
      }
    }
    out[name] = value;
  }
  for (const s of specs) if (out[s.name] === undefined && s.default !== undefined) out[s.name] = s.default;
  return out;
}

export function renderFlagHelp(program: string, summary: string, specs: readonly FlagSpec[]): string {
  const lines = [`Usage of ${program}:`, `  ${summary}`, ""];
  for (const s of specs) {
    const arg = s.kind === "string" ? ` ${s.values ? s.values.join("|") : "string"}` : "";
    lines.push(`  -${s.name}${arg}`);
    lines.push(`    \t${s.usage}${s.default !== undefined ? ` (default ${JSON.stringify(s.default)})` : ""}`);
  }
  return `${lines.join("\n")}\n`;
}
