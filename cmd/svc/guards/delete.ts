import { isSvcError } from "../../../lib/errors.ts";
import { compartmentOf } from "../../../lib/kube/clearance.ts";
import { flagValue } from "../../../lib/kube/grammar.ts";
import type { KubeObject } from "../../../lib/kube/lookup.ts";
import { inCompartment, marksOfMeta } from "../../../lib/kube/mls.ts";
import { refuseRawIntoPods } from "../../../lib/kube/raw-path.ts";
import { say } from "../../say.ts";
import {
  type Guarded,
  type GuardInput,
  refuseAcrossCompartments,
  refuseUnlessOverridden,
  selectedObjects,
} from "./guard.ts";

/**
 * `svc delete` (docs/svc-config.md, "svc delete"): before kubectl deletes, svc looks the same objects up
 * (`kubectl get` with the same selection) and refuses, as the cluster does, when one is of a compartment
 * the current context is not cleared for: the API server answers a delete with the object (a raw DELETE
 * prints it), and a deleted object can be recreated under its name by someone else. `--force` asks the cluster for the
 * override (and keeps kubectl's meaning: bypass graceful deletion). Unmarked objects are deleted with a
 * warning. `--raw` sends a DELETE to a path of the user's choice: one into a pod, a service or a node
 * (through its proxy) is refused, --force or not.
 */
export async function guardDelete(g: GuardInput): Promise<Guarded> {
  const raw = flagValue(g.line, "raw");
  if (raw) refuseRawIntoPods("delete", raw);
  // The same selection, as a get lists it (a named read of another compartment's Secret is the
  // cluster's to refuse, and svc would see that refusal instead of the object).
  let found: KubeObject[];
  try {
    found = await selectedObjects(g, "delete -f -", { accept: () => true });
  } catch (e) {
    // A look-up svc cannot make (the cluster refused it, the type is unknown, the server is down) is a
    // refusal: svc cannot tell what the delete would reach.
    if (!isSvcError(e, "kube_api")) throw e;
    refuseUnlessOverridden(g, e.message, `${g.line.path.join(" ")} of objects svc could not look up`);
    return { forced: true };
  }
  if (refuseAcrossCompartments(g, found, "delete")) return { forced: true };
  for (const o of found) {
    if (compartmentOf(marksOfMeta(o.metadata)).kind !== "none") continue;
    const where = o.metadata?.namespace ? ` in namespace ${o.metadata.namespace}` : "";
    say(
      "svc",
      "warn",
      inCompartment(
        `deleting ${o.kind ?? "object"} ${o.metadata?.name ?? ""}${where}, which has no compartment marks`,
        g.active.label,
      ),
    );
  }
  return {};
}
