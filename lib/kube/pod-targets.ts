/**
 * What a command that reaches into pods names, read the way kubectl reads it:
 * - exec, attach, port-forward: the first argument, `NAME` (a pod) or `TYPE/NAME`; exec and attach also
 *   take `-f` files;
 * - cp: each argument of the form `[NAMESPACE/]POD:PATH` (a `:` makes it a pod side, as for kubectl);
 * - debug: every argument before `--` (`NAME` is a pod, `TYPE/NAME` any kind) and `-f` files;
 * - logs: the first argument, `NAME` or `TYPE/NAME` (a second is the container), or the pods of `-l`.
 * Returns object references (`pod/x`, `deploy/y`) with their namespace where the line gives one.
 */
import { SvcError } from "../errors.ts";
import { type CommandLine, filenames, flagValues } from "./grammar.ts";
import type { KubeObject } from "./lookup.ts";

export interface PodRef {
  ref: string;
  /** Set by `kubectl cp ns/pod:path`; otherwise the command's namespace applies. */
  namespace?: string;
}

export interface PodTargets {
  refs: PodRef[];
  files: string[];
  /** Nodes are targets too (debug): they are not a compartment question. */
  nodesAllowed: boolean;
  /** `logs -l SELECTOR`: every pod it selects in the command's namespace. */
  selector?: string;
}

const asRef = (name: string): string => (name.includes("/") ? name : `pod/${name}`);

export function podTargets(line: CommandLine): PodTargets {
  const command = line.path.join(" ");
  const files = filenames(line);
  if (files.includes("-"))
    throw new SvcError(
      "usage",
      `${command} -f -: svc cannot read the pod from standard input and still pass the input on; give a file`,
    );
  const [first] = line.positionals;
  switch (command) {
    case "exec":
    case "attach":
    case "port-forward": {
      // attach reads two arguments as TYPE NAME, as kubectl's resource builder does.
      const [, second, third] = line.positionals;
      if (command === "attach" && third !== undefined)
        throw new SvcError("usage", "attach: name one pod, as NAME, TYPE/NAME or TYPE NAME");
      const target = command === "attach" && second !== undefined ? `${first}/${second}` : first;
      const refs = files.length > 0 || target === undefined ? [] : [{ ref: asRef(target) }];
      if (refs.length === 0 && files.length === 0)
        throw new SvcError("usage", `${command}: a pod (NAME or TYPE/NAME) or -f FILE is required`);
      return { refs, files, nodesAllowed: false };
    }
    case "cp":
      return { refs: line.positionals.flatMap(cpPod), files: [], nodesAllowed: false };
    case "logs": {
      const selector = flagValues(line, "selector").join(",");
      if (selector && first === undefined) return { refs: [], files: [], nodesAllowed: false, selector };
      if (selector || first === undefined || line.positionals.length > 2)
        throw new SvcError(
          "usage",
          "logs: name one pod (NAME or TYPE/NAME, then a container), or -l SELECTOR",
        );
      return { refs: [{ ref: asRef(first) }], files: [], nodesAllowed: false };
    }
    case "debug": {
      if (line.positionals.length === 0 && files.length === 0)
        throw new SvcError("usage", "debug: a pod or node (NAME or TYPE/NAME) or -f FILE is required");
      return { refs: line.positionals.map((p) => ({ ref: asRef(p) })), files, nodesAllowed: true };
    }
    default:
      throw new Error(`podTargets: ${command} is no pod command`);
  }
}

/** kubectl cp's file spec: no `:` is a local path; `POD:PATH` or `NAMESPACE/POD:PATH` a pod. */
function cpPod(arg: string): PodRef[] {
  const colon = arg.indexOf(":");
  if (colon < 0) return [];
  const pieces = arg.slice(0, colon).split("/");
  if (colon === 0 || pieces.length > 2 || pieces.some((p) => p === ""))
    throw new SvcError(
      "usage",
      `cp ${JSON.stringify(arg)}: expected a local path, POD:PATH or NAMESPACE/POD:PATH`,
    );
  return pieces.length === 2
    ? [{ ref: `pod/${pieces[1]}`, namespace: pieces[0] as string }]
    : [{ ref: `pod/${pieces[0]}` }];
}

const NODE_TYPES = /^(nodes?|no)(\.v1)?\.?\//;

/** A debug target kubectl will treat as a node: not looked up. */
export function isNodeRef(ref: string): boolean {
  return NODE_TYPES.test(ref);
}

/**
 * The label selector of the pods behind an object, as kubectl's SelectorsForObject reads it (the kinds
 * whose pods `exec`, `attach`, `logs` and `port-forward` pick from), or undefined for any other kind.
 */
export function podSelector(o: KubeObject): string | undefined {
  const spec = o.spec ?? {};
  switch (o.kind) {
    case "Service":
    case "ReplicationController":
      return mapSelector(spec.selector);
    case "Deployment":
    case "ReplicaSet":
    case "StatefulSet":
    case "DaemonSet":
    case "Job":
      return labelSelector(spec.selector);
    default:
      return undefined;
  }
}

function mapSelector(m: unknown): string | undefined {
  if (m === null || typeof m !== "object") return undefined;
  const parts = Object.entries(m as Record<string, unknown>).map(([k, v]) => `${k}=${String(v)}`);
  return parts.length > 0 ? parts.join(",") : undefined;
}

interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: { key: string; operator: string; values?: string[] }[];
}

function labelSelector(s: unknown): string | undefined {
  if (s === null || typeof s !== "object") return undefined;
  const sel = s as LabelSelector;
  const parts = Object.entries(sel.matchLabels ?? {}).map(([k, v]) => `${k}=${v}`);
  for (const e of sel.matchExpressions ?? []) {
    const values = (e.values ?? []).join(",");
    if (e.operator === "In") parts.push(`${e.key} in (${values})`);
    else if (e.operator === "NotIn") parts.push(`${e.key} notin (${values})`);
    else if (e.operator === "Exists") parts.push(e.key);
    else if (e.operator === "DoesNotExist") parts.push(`!${e.key}`);
    else return undefined;
  }
  // An empty selector selects every pod; kubectl refuses it, and so does svc.
  return parts.length > 0 ? parts.join(",") : undefined;
}
