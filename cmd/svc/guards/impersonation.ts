import { SvcError } from "../../../lib/errors.ts";
import { flagValue } from "../../../lib/kube/grammar.ts";
import { inCompartment } from "../../../lib/kube/mls.ts";
import { ACCOUNT_PREFIX, serviceAccountOf } from "../../../lib/kube/service-account.ts";
import { type GuardInput, refuseForeign } from "./guard.ts";

/**
 * `--as system:serviceaccount:NS:NAME` on any command (docs/svc-guard.md, "Impersonation and tokens"): the
 * command acts as that account, so svc reads the account as the user themself and refuses, as the
 * cluster's authorization webhook does, one of a compartment the current context is not cleared for (an
 * unmarked account passes, as it does there by default) and one that does not exist (an account created
 * later under its name could be anyone's). A user name with the account prefix that is not an account's is
 * refused: the API server would take it for a person's, and svc cannot tell whose. True when overridden.
 */
export function guardImpersonation(g: GuardInput): boolean {
  const as = flagValue(g.line, "as");
  if (!as?.startsWith(ACCOUNT_PREFIX)) return false;
  const account = serviceAccountOf(as);
  if (!account)
    throw new SvcError(
      "usage",
      `--as ${as}: not a service account's user name (allowed: ${ACCOUNT_PREFIX}<namespace>:<name>); svc cannot tell whose account it is`,
    );
  // As the user: a read as the account would itself be the impersonation in question.
  const me: GuardInput = { ...g, lookup: g.lookup.withoutImpersonation() };
  const [found] = me.lookup.objects(
    [`serviceaccount/${account.name}`, "--ignore-not-found"],
    account.namespace,
  );
  if (!found)
    throw new SvcError(
      "compartment",
      inCompartment(
        `Cannot impersonate service account ${account.namespace}/${account.name}: it does not exist, and one created later under its name could be another compartment's`,
        g.active.label,
      ),
    );
  return refuseForeign(me, [found], "impersonate");
}
