import { flagValue } from "../../../lib/kube/grammar.ts";
import { type Guarded, type GuardInput, refuseAcrossCompartments, refuseForeign } from "./guard.ts";

/**
 * `svc create token NAME` (docs/svc-guard.md, "Impersonation and tokens"): a token speaks for its account,
 * or, bound to a pod, for that pod's compartment, as the cluster's admission webhook decides. svc refuses
 * a token of an account, or bound to a pod, of a compartment the current context is not cleared for. A
 * token bound to a Secret or a Node speaks for the account alone; kubectl refuses any other kind itself.
 */
export async function guardToken(g: GuardInput): Promise<Guarded> {
  const [name] = g.line.positionals;
  // kubectl says what is missing.
  if (name === undefined) return {};
  const account = g.lookup.objects([`serviceaccount/${name}`, "--ignore-not-found"]);
  let forced = refuseAcrossCompartments(g, account, "request a token for");
  const pod = flagValue(g.line, "bound-object-name");
  if (flagValue(g.line, "bound-object-kind") === "Pod" && pod)
    forced = refuseForeign(g, await g.lookup.pods([pod]), "bind a token to") || forced;
  return forced ? { forced } : {};
}
