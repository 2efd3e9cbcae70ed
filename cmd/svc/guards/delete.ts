import { flagSet, flagValue, restWords } from "../../../lib/kube/grammar.ts";
import { COMPARTMENT_LABEL, describeObject } from "../../../lib/kube/inject.ts";
import type { KubeObject } from "../../../lib/kube/lookup.ts";
import { refuseRawIntoPods } from "../../../lib/kube/raw-path.ts";
import { say } from "../../say.ts";
import type { Guarded, GuardInput } from "./guard.ts";

/**
 * `svc delete` (docs/svc-config.md, "svc delete"): before kubectl deletes, svc looks the same objects up
 * (`kubectl get` with the same selection) and warns on stderr for each one of another compartment. It warns,
 * it does not stop: deletion is kubectl's, and RBAC decides. `--force` skips the warnings and is still passed
 * to kubectl, where it keeps kubectl's meaning (bypass graceful deletion). `--raw` sends a DELETE to a path
 * of the user's choice: one into a pod, a service or a node (through its proxy) is refused, --force or not.
 */
const DELETE_ONLY = new Set([
  "force",
  "now",
  "grace-period",
  "wait",
  "cascade",
  "timeout",
  "ignore-not-found",
  "raw",
  "interactive",
  "output",
  "dry-run",
]);

export function guardDelete(g: GuardInput): Guarded {
  const raw = flagValue(g.line, "raw");
  if (raw) refuseRawIntoPods("delete", raw);
  if (flagSet(g.line, "force")) return {};
  // The same selection, as a get: delete's own flags, the command word and the globals (the lookup adds
  // those itself) taken out.
  const drop = new Set([...DELETE_ONLY, ...g.line.flags.filter((f) => f.global).map((f) => f.name)]);
  const words = restWords(g.line, drop);
  let found: KubeObject[];
  try {
    found = g.lookup.objects(words);
  } catch {
    return {}; // kubectl's delete reports what is wrong with the selection
  }
  for (const o of found) {
    const compartment = o.metadata?.labels?.[COMPARTMENT_LABEL] ?? "";
    if (compartment.toUpperCase() === g.active.label) continue;
    const where = o.metadata?.namespace ? ` in namespace ${o.metadata.namespace}` : "";
    say(
      "svc",
      "warn",
      `deleting ${o.kind ?? "object"} ${o.metadata?.name ?? ""}${where}, of another compartment (${compartment || "no compartment label"}); current compartment: ${g.active.label}`,
    );
  }
  g.targets.push(...found.map((o) => describeObject(o as Record<string, unknown>)));
  return {};
}
