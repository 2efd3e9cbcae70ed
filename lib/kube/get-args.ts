import { SvcError } from "../errors.ts";
import { COMPARTMENT_LABEL } from "./inject.ts";

/**
 * `svc get` (4.5) is kubectl get plus the COMPARTMENT column and the compartment filters:
 * - tables (no -o, or -o wide) get `-L svc.io/compartment`, which kubectl heads COMPARTMENT; other
 *   outputs (yaml, json, jsonpath, custom-columns, name) stay kubectl's;
 * - `--current-compartment` (or `--filter-compartment` without a value): only the current compartment;
 *   `--compartment NAME` (or `--filter-compartment=NAME`): only NAME; `--exclude-current-compartment`:
 *   all others. They become label selectors, joined to the user's own `-l`.
 */
export function getArgs(args: string[], current: string): string[] {
  const out: string[] = [];
  const selectors: string[] = [];
  let filters = 0;
  let output: string | undefined;
  for (let i = 0; i < args.length; i++) {
    const a = args[i] as string;
    const value = (flag: string): string | undefined => {
      if (a === flag) {
        const v = args[i + 1];
        if (v === undefined || v.startsWith("-")) throw new SvcError("usage", `${flag} needs a value`);
        i++;
        return v;
      }
      return a.startsWith(`${flag}=`) ? a.slice(flag.length + 1) : undefined;
    };
    if (a === "--current-compartment" || a === "--filter-compartment") {
      selectors.push(`${COMPARTMENT_LABEL}=${current}`);
      filters++;
      continue;
    }
    if (a === "--exclude-current-compartment") {
      selectors.push(`${COMPARTMENT_LABEL}!=${current}`);
      filters++;
      continue;
    }
    const named = value("--compartment") ?? (a.startsWith("--filter-compartment=") ? a.slice(21) : undefined);
    if (named !== undefined) {
      if (!/^[A-Za-z0-9-]+$/.test(named))
        throw new SvcError(
          "usage",
          `--compartment ${JSON.stringify(named)}: expected <COUNTRY>-<SENSITIVITY>-<COMPARTMENT>`,
        );
      selectors.push(`${COMPARTMENT_LABEL}=${named.toUpperCase()}`);
      filters++;
      continue;
    }
    const selector = value("-l") ?? value("--selector");
    if (selector !== undefined) {
      selectors.unshift(selector);
      continue;
    }
    const o = value("-o") ?? value("--output");
    if (o !== undefined) output = o;
    else if (a.startsWith("-o") && a.length > 2 && !a.startsWith("--")) output = a.slice(2);
    out.push(a);
    if (o !== undefined) out.push(...(a.includes("=") ? [] : [o]));
  }
  if (filters > 1)
    throw new SvcError(
      "usage",
      "use one of --current-compartment, --compartment, --exclude-current-compartment, --filter-compartment",
    );
  const table = output === undefined || output === "wide";
  return [
    ...out,
    ...(selectors.length ? [`--selector=${selectors.join(",")}`] : []),
    ...(table ? [`--label-columns=${COMPARTMENT_LABEL}`] : []),
  ];
}
