/**
 * The compartment context a command runs in: the current context of the file, with SVC_COUNTRY,
 * SVC_SENSITIVITY and SVC_COMPARTMENT overriding its fields (the environment wins: docs/svc-config.md), and
 * the kubeconfig from KUBECONFIG, else the file's `kubeconfig`, else ~/.kube/config.
 *
 * requireExplicitContextSwitch (decided here, docs/svc-config.md): when true, an environment variable may
 * not change the compartment — a value that differs from the current context is refused, so that moving
 * to another compartment always takes `svc context use`, which is visible and audited.
 */
import { homedir } from "node:os";
import { join } from "node:path";
import { SvcError } from "../errors.ts";
import type { KubeTarget } from "../kube/kubectl.ts";
import {
  type CompartmentContext,
  compartmentLabel,
  findContext,
  partProblem,
  type SvcConfig,
} from "./schema.ts";

export interface ActiveContext extends CompartmentContext {
  name: string;
  /** `<COUNTRY>-<SENSITIVITY>-<COMPARTMENT>`, the `svc.io/compartment` label value. */
  label: string;
  kubeconfig: string;
  /** Environment variables that changed a field. */
  overriddenBy: string[];
  /**
   * What kubectl is pointed at. `kubeconfig` only when the file chose one and KUBECONFIG is unset: kubectl
   * reads KUBECONFIG itself, as the list of files it merges, so svc never turns it into one --kubeconfig.
   */
  target: KubeTarget;
}

const OVERRIDES = [
  ["SVC_COUNTRY", "country"],
  ["SVC_SENSITIVITY", "sensitivity"],
  ["SVC_COMPARTMENT", "compartment"],
] as const;

export function activeContext(
  config: SvcConfig,
  env: Record<string, string | undefined> = process.env,
): ActiveContext {
  const name = config.currentContext;
  if (!name)
    throw new SvcError(
      "usage",
      "no current context; create one with svc context create, then svc context use <name>",
    );
  const base = findContext(config, name);
  if (!base)
    throw new SvcError(
      "usage",
      `Context not found: the current context ${JSON.stringify(name)} is not among the contexts (known: ${Object.keys(config.contexts).join(", ") || "none"})`,
    );
  const context: CompartmentContext = { ...base };
  const overriddenBy: string[] = [];
  for (const [variable, field] of OVERRIDES) {
    const value = env[variable];
    if (!value || value.toUpperCase() === base[field].toUpperCase()) continue;
    const why = partProblem(field, value);
    if (why) throw new SvcError("usage", `${variable}: ${why}`);
    // A refusal to change compartments: audited as one (cmd/svc/passthrough.ts).
    if (config.requireExplicitContextSwitch)
      throw new SvcError(
        "compartment",
        `${variable}=${value} would change the ${field} of context ${name} (${base[field]}), and requireExplicitContextSwitch is true: switch with svc context use <name>, or unset ${variable}`,
      );
    context[field] = value.toUpperCase();
    overriddenBy.push(variable);
  }
  const kubeconfig = env.KUBECONFIG || expandHome(config.kubeconfig) || join(homedir(), ".kube", "config");
  const file = configuredKubeconfig(config, env);
  const target: KubeTarget = {
    kubeContext: context.kubeContext,
    ...(file ? { kubeconfig: file } : {}),
    ...(context.namespace ? { namespace: context.namespace } : {}),
  };
  return { ...context, name, label: compartmentLabel(context), kubeconfig, overriddenBy, target };
}

/**
 * The file's `kubeconfig`, which svc hands kubectl as --kubeconfig, unless KUBECONFIG is set: kubectl reads
 * a KUBECONFIG list itself and merges it.
 */
export function configuredKubeconfig(
  config: Pick<SvcConfig, "kubeconfig">,
  env: Record<string, string | undefined> = process.env,
): string | undefined {
  return !env.KUBECONFIG && config.kubeconfig ? expandHome(config.kubeconfig) : undefined;
}

function expandHome(path: string | undefined): string | undefined {
  return path?.replace(/^~(?=\/|$)/, homedir());
}
