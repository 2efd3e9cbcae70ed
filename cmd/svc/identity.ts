/**
 * `svc identity` (docs/svc-config.md): the active compartment and who the cluster says you are (a
 * SelfSubjectReview, through kubectl), with the default groups and the svc: groups; then the clearances the
 * cluster sees in your groups (what its admission policy and webhook go by, docs/admission.md), with a
 * warning when they do not cover the active compartment. A service account holds no clearance groups:
 * the cluster's compartment webhook says what it speaks for (its marks, or its pod's), and svc asks it.
 */
import { defineCommand } from "citty";
import { loadConfig } from "../../lib/config/file.ts";
import { activeContext } from "../../lib/config/resolve.ts";
import { SvcError } from "../../lib/errors.ts";
import { reviewArgs, selfAccessReview } from "../../lib/kube/access-review.ts";
import {
  CLEARANCE_PERMISSION,
  type Clearances,
  clearancesOf,
  describeClearances,
  missingClearances,
  SENSITIVITY_ORDER,
  spokenGroups,
} from "../../lib/kube/clearance.ts";
import { findKubectl, type KubeTarget, withContext } from "../../lib/kube/kubectl.ts";
import { serviceAccountOf } from "../../lib/kube/service-account.ts";
import { say, svcWarning } from "../say.ts";
import { action, checkOutput, outputArg, printStructured, STRUCTURED } from "./cli.ts";

const args = outputArg;

export default defineCommand({
  meta: { name: "identity", description: "Shows your compartment context, cluster user and groups" },
  args,
  run: action(args, async (a) => {
    checkOutput(a.output, STRUCTURED);
    const { config } = loadConfig(undefined, { warn: svcWarning });
    const c = activeContext(config);
    const kubectl = findKubectl();
    const cmd = [kubectl, ...withContext(["auth", "whoami", "-o", "json"], c.target)];
    const r = Bun.spawnSync(cmd, { stdout: "pipe", stderr: "pipe" });
    if (r.exitCode !== 0)
      throw new SvcError(
        "kube_api",
        `cannot ask the cluster who you are (kubectl auth whoami): ${r.stderr.toString().trim()}`,
      );
    const info = (JSON.parse(r.stdout.toString()).status?.userInfo ?? {}) as {
      username?: string;
      groups?: string[];
    };
    const svcGroups = [
      `svc:country:${c.country}`,
      `svc:sensitivity:${c.sensitivity}`,
      `svc:compartment:${c.compartment}`,
    ].map((g) => g.toLowerCase());
    const groups = [...new Set([...config.defaultUserGroups, ...(info.groups ?? []), ...svcGroups])];
    const { cleared, basis } = clusterClearances(kubectl, c.target, info);
    const missing = missingClearances(cleared, {
      country: c.country.toLowerCase(),
      sensitivity: c.sensitivity.toLowerCase(),
      compartment: c.compartment.toLowerCase(),
    });
    const identity = {
      compartment: c.label,
      country: c.country,
      sensitivity: c.sensitivity,
      compartmentName: c.compartment,
      kubeContext: c.kubeContext,
      user: info.username ?? "",
      userGroups: groups,
      clusterClearances: {
        countries: cleared.countries,
        sensitivities: SENSITIVITY_ORDER.slice(0, cleared.sensitivity + 1),
        compartments: cleared.compartments,
        coversActiveCompartment: missing.length === 0,
        basis,
      },
    };
    if (missing.length > 0)
      say(
        "svc",
        "warn",
        `the cluster does not clear you for ${c.label} (missing: ${missing.join(", ")}; you are cleared for ${describeClearances(cleared)}, ${basis}): where its compartment policy is installed, it refuses your exec into that compartment's pods and writes of its objects`,
      );
    if (await printStructured(a.output, identity)) return;
    const rows: [string, string][] = [
      // The label first; the compartment row is its last part (two rows named Compartment misled).
      ["Label", identity.compartment],
      ["Country", identity.country],
      ["Sensitivity", identity.sensitivity],
      ["Compartment", identity.compartmentName],
      ["Kube Context", identity.kubeContext],
      ["User", identity.user],
      ["User Groups", groups.join(", ")],
      ["Clearances", `${describeClearances(cleared)} (${basis})`],
    ];
    for (const [k, v] of rows) process.stdout.write(`${`${k}:`.padEnd(14)}${v}\n`);
  }),
});

/**
 * The clearances the cluster's rules apply to the user, and where they come from: a person's `svc:`
 * groups; for a service account, the answer of the compartment webhook to "get
 * compartmentclearances.svc.dev" (a SelfSubjectAccessReview made with the account's own credentials, so
 * the webhook sees the pod its token is bound to), as the admission policy asks it.
 */
function clusterClearances(
  kubectl: string,
  target: KubeTarget,
  info: { username?: string; groups?: string[] },
): { cleared: Clearances; basis: string } {
  if (!serviceAccountOf(info.username ?? ""))
    return { cleared: clearancesOf(info.groups ?? []), basis: "from the cluster's groups" };
  const review = selfAccessReview(CLEARANCE_PERMISSION);
  const r = Bun.spawnSync([kubectl, ...withContext(reviewArgs("json"), target)], {
    stdin: new TextEncoder().encode(review),
    stdout: "pipe",
    stderr: "pipe",
  });
  if (r.exitCode !== 0)
    throw new SvcError(
      "kube_api",
      `cannot ask the cluster what service account ${info.username} speaks for: ${r.stderr.toString().trim()}`,
    );
  let status: { allowed?: boolean; reason?: string } = {};
  try {
    status = (JSON.parse(r.stdout.toString()) as { status?: typeof status }).status ?? {};
  } catch {}
  const groups = status.allowed === true ? spokenGroups(status.reason ?? "") : undefined;
  if (groups)
    return {
      cleared: clearancesOf(groups),
      basis: "the service account's, from the cluster's compartment webhook",
    };
  return {
    cleared: clearancesOf([]),
    basis: `none: ${status.reason || "the cluster's compartment webhook gave no answer (is it installed?)"}`,
  };
}
