/**
 * Reads of the data of Secrets and ConfigMaps (docs/svc-guard.md, "Reads of Secrets, ConfigMaps and
 * logs"): `get` with an output that shows objects whole (yaml, json, jsonpath, go-template, `--template`,
 * custom-columns …; not the table, `wide` or `name`) and `describe`. svc finds the objects the command will
 * show through the command's own cluster target, and refuses if the current context is not cleared for
 * one (guard.ts, notCleared) with the words of the exec refusal; unmarked objects pass, as the cluster's
 * authorization webhook lets them by default. It lists their kind, with the command's selectors, `-A` and
 * svc get's compartment filters, and matches the names itself; `-f` and `-k` objects are read as kubectl
 * reads them. `describe NAME` also shows the objects whose names start with NAME when none is called
 * NAME: all of those are checked. `--force` overrides for users the cluster allows to.
 */
import { compartmentFilter } from "../../../lib/kube/get-args.ts";
import { flagValue } from "../../../lib/kube/grammar.ts";
import { describeObject } from "../../../lib/kube/inject.ts";
import type { KubeObject } from "../../../lib/kube/lookup.ts";
import { DATA_RESOURCES } from "../../../lib/kube/metadata.ts";
import { coreTypeWord } from "../../../lib/kube/type-name.ts";
import {
  type Guarded,
  type GuardInput,
  refuseAcrossCompartments,
  refuseForeign,
  selectedObjects,
} from "./guard.ts";

const DATA_KINDS = new Set(Object.keys(DATA_RESOURCES));
/** The kinds whose objects hold data a read prints. */
const DATA_OBJECTS = new Set(Object.values(DATA_RESOURCES).map((r) => r.kind));

/** `secrets`, `Secret`, `secrets.v1.`, `cm..` → its data kind; another group's (`secrets.example.com`) → undefined. */
function dataKind(type: string): string | undefined {
  const word = coreTypeWord(type);
  return word !== undefined && DATA_KINDS.has(word) ? word : undefined;
}

/** Outputs that show no object's data. */
const TABLES = new Set(["wide", "name"]);

export async function guardReads(g: GuardInput): Promise<Guarded> {
  const describing = g.line.path[0] === "describe";
  // kubectl prints with a go-template when --template is given without -o.
  const output = flagValue(g.line, "output") ?? (flagValue(g.line, "template") ? "go-template" : undefined);
  if (!describing && (output === undefined || TABLES.has(output))) return {};
  // svc get's compartment filters narrow what is printed: they narrow what is checked too.
  const filter = describing ? undefined : compartmentFilter(g.line, g.active.label);
  const live = (
    await selectedObjects(g, `${g.line.path[0]} -f - -o ${output ?? ""}`, {
      accept: (type) => dataKind(type) !== undefined,
      describing,
      ...(filter ? { filter } : {}),
    })
  ).filter((o) => DATA_OBJECTS.has(o.kind ?? ""));
  g.targets.push(...live.map((o) => describeObject(o as Record<string, unknown>)));
  return refuseDataReads(g, live) ? { forced: true } : {};
}

/**
 * Refuses, unless overridden, when one of `objects` is a Secret or ConfigMap the current context is not
 * cleared for (unmarked ones pass); true when the override was used. Also for `edit`, whose editor
 * shows what it opens.
 */
export function refuseDataReads(g: GuardInput, objects: KubeObject[]): boolean {
  return refuseForeign(
    g,
    objects.filter((o) => DATA_OBJECTS.has(o.kind ?? "")),
    "read",
  );
}

/**
 * `apply view-last-applied` prints the configuration last applied to each object it names, of any kind:
 * for a Secret or ConfigMap that is its data. Every object it selects is looked up as `get` would select
 * it, and one the current context is not cleared for is refused (unmarked ones pass, as for reads).
 */
export async function guardLastApplied(g: GuardInput): Promise<Guarded> {
  const objects = await selectedObjects(g, "apply view-last-applied -f -", { accept: () => true });
  return refuseAcrossCompartments(g, objects, "read the last applied configuration of")
    ? { forced: true }
    : {};
}
