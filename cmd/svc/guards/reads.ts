import { SvcError } from "../../../lib/errors.ts";
import { compartmentFilter } from "../../../lib/kube/get-args.ts";
import { filenames, flagSet, flagValue, flagValues, restWords } from "../../../lib/kube/grammar.ts";
import { describeObject } from "../../../lib/kube/inject.ts";
import type { KubeObject } from "../../../lib/kube/lookup.ts";
import { coreTypeWord } from "../../../lib/kube/type-name.ts";
import { type Guarded, type GuardInput, notCleared, refuseUnlessOverridden } from "./guard.ts";

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
const DATA_KINDS = new Set(["secret", "secrets", "configmap", "configmaps", "cm"]);
const WHAT_OF_KIND: Record<string, string> = { Secret: "secret", ConfigMap: "config map" };

/** `secrets`, `Secret`, `secrets.v1.`, `cm..` → its data kind; another group's (`secrets.example.com`) → undefined. */
function dataKind(type: string): string | undefined {
  const word = coreTypeWord(type);
  return word !== undefined && DATA_KINDS.has(word) ? word : undefined;
}

/** Outputs that show no object's data. */
const TABLES = new Set(["wide", "name"]);

export function guardReads(g: GuardInput): Guarded {
  const describing = g.line.path[0] === "describe";
  // kubectl prints with a go-template when --template is given without -o.
  const output = flagValue(g.line, "output") ?? (flagValue(g.line, "template") ? "go-template" : undefined);
  if (!describing && (output === undefined || TABLES.has(output))) return {};
  const [first] = g.line.positionals;
  const fileArgs = filenames(g.line);
  const files = [
    ...fileArgs.flatMap((f) => ["--filename", f]),
    ...flagValues(g.line, "kustomize").flatMap((k) => ["--kustomize", k]),
  ];
  // The data kinds the command names, and the names it gives for each (none: every object).
  const named = new Map<string, string[]>();
  if (files.length === 0 && first === undefined) return {};
  if (fileArgs.includes("-"))
    throw new SvcError(
      "usage",
      `${g.line.path[0]} -f - -o ${output ?? ""}: svc cannot read the objects from standard input and still pass the input on; give a file`,
    );
  if (files.length > 0) named.set("", []);
  else if (first?.includes("/"))
    for (const p of g.line.positionals) {
      const [type = "", name = ""] = p.split("/");
      if (dataKind(type)) named.set(type, [...(named.get(type) ?? []), name]);
    }
  else
    for (const type of (first ?? "").split(","))
      if (dataKind(type)) named.set(type, g.line.positionals.slice(1));
  if (named.size === 0) return {};
  // svc get's compartment filters narrow what is printed: they narrow what is checked too.
  const filter = describing ? undefined : compartmentFilter(g.line, g.active.label);
  const selectors = [
    ...[...flagValues(g.line, "selector"), ...(filter ? [filter] : [])].map((s) => `--selector=${s}`),
    ...flagValues(g.line, "field-selector").map((s) => `--field-selector=${s}`),
    ...(flagSet(g.line, "all-namespaces") ? ["--all-namespaces"] : []),
    ...(flagSet(g.line, "recursive") ? ["--recursive"] : []),
  ];
  // Lists, not reads by name (but for -f and -k, which kubectl reads by name): the cluster's authorization
  // webhook answers named reads itself, and svc would see its refusal instead of the object.
  const live: KubeObject[] = [];
  for (const [type, names] of named) {
    const words = type === "" ? files : [type];
    const objects = g.lookup
      .objects([...words, ...selectors, "--ignore-not-found"])
      .filter((o) => Object.hasOwn(WHAT_OF_KIND, o.kind ?? ""));
    live.push(
      ...(names.length === 0
        ? objects
        : objects.filter((o) =>
            describing ? shownByDescribe(o, names, objects) : names.includes(o.metadata?.name ?? ""),
          )),
    );
  }
  g.targets.push(...live.map((o) => describeObject(o as Record<string, unknown>)));
  return refuseDataReads(g, live) ? { forced: true } : {};
}

/**
 * Refuses, unless overridden, when one of `objects` is a Secret or ConfigMap the current context is not
 * cleared for (unmarked ones pass); true when the override was used. Also for `edit`, whose editor
 * shows what it opens.
 */
export function refuseDataReads(g: GuardInput, objects: KubeObject[]): boolean {
  const foreign = notCleared(
    g,
    objects.filter((o) => Object.hasOwn(WHAT_OF_KIND, o.kind ?? "")),
    "allow",
  );
  if (!foreign) return false;
  const what = WHAT_OF_KIND[foreign.object.kind as string] as string;
  refuseUnlessOverridden(
    g,
    `Cannot read ${what} in another compartment (${foreign.shown})`,
    `${g.line.path.join(" ")} of ${what} ${foreign.object.metadata?.name} of compartment ${foreign.shown}`,
  );
  return true;
}

/** kubectl describe TYPE NAME: the object NAME when there is one, else every object whose name starts so. */
function shownByDescribe(o: KubeObject, names: string[], all: KubeObject[]): boolean {
  const name = o.metadata?.name ?? "";
  return names.some((n) =>
    all.some((x) => x.kind === o.kind && x.metadata?.name === n) ? name === n : name.startsWith(n),
  );
}

/**
 * `apply view-last-applied` prints the configuration last applied to each object it names, of any kind:
 * for a Secret or ConfigMap that is its data. Every object it names is looked up as `get` would select
 * it, and one the current context is not cleared for is refused (unmarked ones pass, as for reads).
 */
export function guardLastApplied(g: GuardInput): Guarded {
  if (filenames(g.line).includes("-"))
    throw new SvcError(
      "usage",
      "apply view-last-applied -f -: svc cannot read the objects from standard input and still pass the input on; give a file",
    );
  // The same selection, as a get: its own flags, the command words and the globals (the lookup adds
  // those itself) taken out.
  const globals = g.line.flags.filter((f) => f.global).map((f) => f.name);
  const words = restWords(g.line, new Set(["output", "all", ...g.own, ...globals]));
  const objects = g.lookup.objects([...words, "--ignore-not-found"]);
  g.targets.push(...objects.map((o) => describeObject(o as Record<string, unknown>)));
  const foreign = notCleared(g, objects, "allow");
  if (!foreign) return {};
  const what = `${foreign.object.kind ?? "object"} ${foreign.object.metadata?.name ?? ""}`;
  refuseUnlessOverridden(
    g,
    `Cannot read the last applied configuration of ${what} in another compartment (${foreign.shown})`,
    `apply view-last-applied of ${what} of compartment ${foreign.shown}`,
  );
  return { forced: true };
}
