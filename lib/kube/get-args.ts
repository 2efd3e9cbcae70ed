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
  const own: string[] = []; // the user's -l selectors
  const compartment: string[] = []; // the selector of the compartment filter (at most one)
  let output: string | undefined;
  for (let i = 0; i < args.length; i++) {
    const start = i;
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
      compartment.push(`${COMPARTMENT_LABEL}=${current}`);
      continue;
    }
    if (a === "--exclude-current-compartment") {
      compartment.push(`${COMPARTMENT_LABEL}!=${current}`);
      continue;
    }
    const named = value("--compartment") ?? value("--filter-compartment");
    if (named !== undefined) {
      if (!/^[A-Za-z0-9-]+$/.test(named))
        throw new SvcError(
          "usage",
          `--compartment ${JSON.stringify(named)}: expected <COUNTRY>-<SENSITIVITY>-<COMPARTMENT>`,
        );
      compartment.push(`${COMPARTMENT_LABEL}=${named.toUpperCase()}`);
      continue;
    }
    const selector = value("-l") ?? value("--selector");
    if (selector !== undefined) {
      own.push(selector);
      continue;
    }
    const o = value("-o") ?? value("--output") ?? (/^-o[^-]/.test(a) ? a.slice(2) : undefined);
    if (o !== undefined) output = o;
    out.push(...args.slice(start, i + 1));
  }
  if (compartment.length > 1)
    throw new SvcError(
      "usage",
      "use one of --current-compartment, --compartment, --exclude-current-compartment, --filter-compartment",
    );
  const selectors = [...own, ...compartment];
  const table = output === undefined || output === "wide";
  return [
    ...out,
    ...(selectors.length ? [`--selector=${selectors.join(",")}`] : []),
    ...(table ? [`--label-columns=${COMPARTMENT_LABEL}`] : []),
  ];
}
