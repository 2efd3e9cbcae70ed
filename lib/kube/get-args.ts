import { SvcError } from "../errors.ts";
import { parseCompartmentLabel } from "./clearance.ts";
import { beforeDashes, type CommandLine, flagSet, flagValue, flagValues, restWords } from "./grammar.ts";
import { COMPARTMENT_LABEL } from "./mls.ts";
import { refuseRawIntoPods } from "./raw-path.ts";

/**
 * The words after `get` for `svc get` (docs/svc-config.md, "svc get") is kubectl get plus the COMPARTMENT
 * column and the compartment filters:
 * - tables (no -o, or -o wide) get `-L svc.io/compartment`, which kubectl heads COMPARTMENT; other
 *   outputs (yaml, json, jsonpath, custom-columns, name) stay kubectl's;
 * - `--current-compartment` (or `--filter-compartment` without a value): only the current compartment;
 *   `--compartment NAME` (or `--filter-compartment=NAME`): only NAME; `--exclude-current-compartment`:
 *   all others. They become label selectors, joined to the user's own `-l`.
 * `--raw` into a pod, a service or a node is refused (lib/kube/raw-path.ts).
 * `line` is read with svc's get flags (cmd/svc/line.ts).
 */

const FILTERS = ["current-compartment", "compartment", "exclude-current-compartment", "filter-compartment"];

/** The label selector svc get's compartment filters stand for, or undefined without one. */
export function compartmentFilter(line: CommandLine, current: string): string | undefined {
  const compartment: string[] = [];
  for (const f of line.flags) {
    if (f.name === "current-compartment" && f.value === "true")
      compartment.push(`${COMPARTMENT_LABEL}=${current}`);
    else if (f.name === "exclude-current-compartment" && f.value === "true")
      compartment.push(`${COMPARTMENT_LABEL}!=${current}`);
    else if (f.name === "compartment" || (f.name === "filter-compartment" && f.value !== "")) {
      // A label selector matches the label exactly: anything else would silently match nothing.
      if (!parseCompartmentLabel(f.value))
        throw new SvcError(
          "usage",
          `--${f.name} ${JSON.stringify(f.value)}: expected a compartment label <COUNTRY>-<SENSITIVITY>-<COMPARTMENT>, such as UK-S-BRAVO (the COMPARTMENT column shows them)`,
        );
      compartment.push(`${COMPARTMENT_LABEL}=${f.value.toUpperCase()}`);
    } else if (f.name === "filter-compartment") compartment.push(`${COMPARTMENT_LABEL}=${current}`);
  }
  if (compartment.length > 1)
    throw new SvcError(
      "usage",
      "use one of --current-compartment, --compartment, --exclude-current-compartment, --filter-compartment",
    );
  return compartment[0];
}

export function getArgs(line: CommandLine, current: string): string[] {
  const filter = compartmentFilter(line, current);
  const compartment = filter ? [filter] : [];
  const raw = flagValue(line, "raw");
  // An empty --raw is no --raw to kubectl.
  if (raw) refuseRawIntoPods("get", raw);
  const selectors = [...flagValues(line, "selector"), ...compartment];
  const output = flagValue(line, "output");
  const table = (output === undefined || output === "wide") && !raw && !flagSet(line, "help");
  // --force is svc's (the override of its read check, cmd/svc/guards/reads.ts), never kubectl's.
  const rest = restWords(line, new Set([...FILTERS, "force", ...(compartment.length ? ["selector"] : [])]));
  const added = [
    ...(compartment.length ? [`--selector=${selectors.join(",")}`] : []),
    ...(table ? [`--label-columns=${COMPARTMENT_LABEL}`] : []),
  ];
  return beforeDashes(rest, added);
}
