/**
 * What every guard is given and returns. A guard reads the command line kubectl will run, looks up what it
 * needs through `lookup` (kubectl aimed at the command's own cluster target), and either throws (a
 * refusal: code "compartment"; anything it cannot tell: "usage" or "kube_api") or says what to run.
 */
import type { ActiveContext } from "../../../lib/config/resolve.ts";
import { SvcError } from "../../../lib/errors.ts";
import { reviewArgs, selfAccessReview } from "../../../lib/kube/access-review.ts";
import { contextClearances, judgeMarks, OVERRIDE_PERMISSION } from "../../../lib/kube/clearance.ts";
import { type CommandLine, filenames, flagSet, flagValues, restWords } from "../../../lib/kube/grammar.ts";
import { describeObject } from "../../../lib/kube/inject.ts";
import type { KubeObject, Lookup } from "../../../lib/kube/lookup.ts";
import { COMPARTMENT_LABEL, inCompartment, marksOfMeta } from "../../../lib/kube/mls.ts";
import { say } from "../../say.ts";

export interface GuardInput {
  line: CommandLine;
  active: ActiveContext;
  lookup: Lookup;
  /** What the command applies to, for the audit log; filled as soon as it is known, refusals included. */
  targets: string[];
  /** svc's own flags on this command, never passed to kubectl. */
  own: Set<string>;
}

/** The words after the command without svc's own flags and the given ones. */
export function restWithout(g: GuardInput, ...names: string[]): string[] {
  return restWords(g.line, new Set([...g.own, ...names]));
}

export interface Guarded {
  /** kubectl's command words, when the guard runs another command (`create -f -` for what it made). */
  command?: string[];
  /**
   * kubectl's words after the command, when they differ from the user's (svc's own flags removed, `-f -`
   * for what svc read and checked). svc puts the command words and the context's flags before them.
   */
  args?: string[];
  /** Flags the guard set in `args` (a namespace it resolved): the context's default is not added. */
  given?: string[];
  stdin?: string;
  env?: Record<string, string>;
  /** An override of the compartment check was used (the cluster allowed it). */
  forced?: boolean;
  /** Runs after kubectl: a refusal found during the run (edit) turns the decision. */
  after?: () => "refused" | undefined;
}

/**
 * The first of `objects` the current context is not cleared for, by the rule the cluster's webhooks apply
 * to the requester's groups (lib/kube/clearance.ts), with how a refusal names its compartment (`whose`):
 * " of compartment UK-S-BRAVO", ", which has no compartment label", or its label and why its marks cannot
 * be read. An object without marks is refused, or passes with `unlabeled` "allow" (reads, as the
 * authorization webhook's default `unlabeled_reads`).
 */
function notCleared(
  g: GuardInput,
  objects: KubeObject[],
  unlabeled: "allow" | "deny" = "deny",
): { object: KubeObject; whose: string } | undefined {
  if (objects.length === 0) return undefined;
  const clearances = contextClearances(g.active);
  for (const object of objects) {
    const j = judgeMarks(clearances, [marksOfMeta(object.metadata)]);
    if (j.kind === "cleared" || (j.kind === "unlabeled" && unlabeled === "allow")) continue;
    const label = object.metadata?.labels?.[COMPARTMENT_LABEL];
    const whose =
      j.kind === "unlabeled"
        ? ", which has no compartment label"
        : j.kind === "unreadable"
          ? ` (${label ? `${COMPARTMENT_LABEL}=${label}` : "no compartment label"}; marks svc cannot read: ${j.why})`
          : ` of compartment ${j.shown}`;
    return { object, whose };
  }
  return undefined;
}

/** An object as kubectl names it: `pod/web-0`, `configmap/settings`. */
export const objectRef = (o: KubeObject) => `${(o.kind ?? "object").toLowerCase()}/${o.metadata?.name ?? ""}`;

/**
 * A compartment refusal, unless the user asked for `--force` and the cluster allows the override; then
 * a warning is printed and the caller records the command as forced.
 */
export function refuseUnlessOverridden(g: GuardInput, refusal: string, warning: string): void {
  if (!flagSet(g.line, "force")) throw new SvcError("compartment", inCompartment(refusal, g.active.label));
  // In the command's namespace when it names one, as the cluster's webhooks ask; else cluster-wide.
  const namespace = g.lookup.namedNamespace();
  const review = selfAccessReview({ ...OVERRIDE_PERMISSION, ...(namespace ? { namespace } : {}) });
  const can = g.lookup.run(reviewArgs("jsonpath={.status.allowed}"), null, review);
  if (can.out.trim() !== "true")
    throw new SvcError(
      "compartment",
      inCompartment(
        `--force refused: you may not override compartments (the cluster must allow "${OVERRIDE_PERMISSION.verb}" on ${OVERRIDE_PERMISSION.resource}.${OVERRIDE_PERMISSION.group}; see docs/svc-guard.md)`,
        g.active.label,
      ),
    );
  say("svc", "warn", `--force: ${warning} from ${g.active.label}`);
}

/**
 * The objects a command acts on, recorded as its targets; the first the current context is not cleared
 * for (unmarked ones pass) is refused — "Cannot <cannot> pod/x of compartment UK-S-BRAVO; current
 * compartment: US-TS-ALPHA" — unless overridden. True when the override was used.
 */
export function refuseAcrossCompartments(g: GuardInput, objects: KubeObject[], cannot: string): boolean {
  g.targets.push(...objects.map((o) => describeObject(o as Record<string, unknown>)));
  return refuseForeign(g, objects, cannot);
}

/**
 * refuseAcrossCompartments for objects not recorded as the command's targets (those it reaches through
 * others, or recorded already). Every compartment refusal of svc's is this one line, naming the object,
 * its compartment and the current one.
 */
export function refuseForeign(
  g: GuardInput,
  objects: KubeObject[],
  cannot: string,
  unlabeled: "allow" | "deny" = "allow",
): boolean {
  const foreign = notCleared(g, objects, unlabeled);
  if (!foreign) return false;
  const what = `${objectRef(foreign.object)}${foreign.whose}`;
  refuseUnlessOverridden(g, `Cannot ${cannot} ${what}`, `${g.line.path.join(" ")} of ${what}`);
  return true;
}

/**
 * The objects a command line selects as `get` would (`TYPE NAME…`, `TYPE/NAME…`, `-f`, `-k`, `-l`,
 * `--field-selector`, `-A`), of the TYPE words `accept` takes; none when it names none. svc lists each
 * type and matches the names itself rather than reading them by name (but for `-f` and `-k`, which
 * kubectl reads by name): the cluster's authorization webhook answers named reads itself, and svc would
 * see its refusal instead of the object. `describing` matches names as describe does (a prefix when no
 * object has the name); `filter` is a further label selector (svc get's compartment filters).
 */
export async function selectedObjects(
  g: GuardInput,
  command: string,
  o: { accept: (type: string) => boolean; describing?: boolean; filter?: string },
): Promise<KubeObject[]> {
  const [first] = g.line.positionals;
  const fileArgs = filenames(g.line);
  const files = [
    ...fileArgs.flatMap((f) => ["--filename", f]),
    ...flagValues(g.line, "kustomize").flatMap((k) => ["--kustomize", k]),
  ];
  if (files.length === 0 && first === undefined) return [];
  if (fileArgs.includes("-"))
    throw new SvcError(
      "usage",
      `${command}: svc cannot read the objects from standard input and still pass the input on; give a file`,
    );
  // The types the command names, and the names it gives for each (none: every object).
  const named = new Map<string, string[]>();
  if (files.length > 0) named.set("", []);
  else if (first?.includes("/"))
    for (const p of g.line.positionals) {
      const [type = "", name = ""] = p.split("/");
      if (o.accept(type)) named.set(type, [...(named.get(type) ?? []), name]);
    }
  else
    for (const type of (first ?? "").split(","))
      if (o.accept(type)) named.set(type, g.line.positionals.slice(1));
  const selectors = [
    ...[...flagValues(g.line, "selector"), ...(o.filter ? [o.filter] : [])].map((s) => `--selector=${s}`),
    ...flagValues(g.line, "field-selector").map((s) => `--field-selector=${s}`),
    ...(flagSet(g.line, "all-namespaces") ? ["--all-namespaces"] : []),
    ...(flagSet(g.line, "recursive") ? ["--recursive"] : []),
  ];
  const live: KubeObject[] = [];
  for (const [type, names] of named) {
    const objects =
      type === ""
        ? g.lookup.objects([...files, ...selectors, "--ignore-not-found"])
        : await g.lookup.listed(type, selectors);
    live.push(
      ...(names.length === 0
        ? objects
        : objects.filter((x) =>
            o.describing ? shownByDescribe(x, names, objects) : names.includes(x.metadata?.name ?? ""),
          )),
    );
  }
  return live;
}

/** kubectl describe TYPE NAME: the object NAME when there is one, else every object whose name starts so. */
function shownByDescribe(o: KubeObject, names: string[], all: KubeObject[]): boolean {
  const name = o.metadata?.name ?? "";
  return names.some((n) =>
    all.some((x) => x.kind === o.kind && x.metadata?.name === n) ? name === n : name.startsWith(n),
  );
}
