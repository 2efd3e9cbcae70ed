import { COMPARTMENT_LABEL } from "../../lib/kube/inject.ts";
import { type KubeTarget, withContext } from "../../lib/kube/kubectl.ts";

/**
 * `svc delete` (4.5): before kubectl deletes, svc looks the same objects up (`kubectl get` with the same
 * selection) and warns on stderr for each one of another compartment. It warns, it does not stop:
 * deletion is kubectl's, and RBAC decides. `--force` skips the warnings and is still passed to kubectl,
 * where it keeps kubectl's meaning (bypass graceful deletion).
 */
const DELETE_ONLY =
  /^--(force|now|grace-period|wait|cascade|timeout|ignore-not-found|raw|interactive|output|dry-run)(=.*)?$/;

export function deleteWarnings(
  args: string[],
  current: string,
  kubectl: string,
  target: KubeTarget,
): string[] {
  if (args.includes("--force") || args.includes("--force=true")) return [];
  const get: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i] as string;
    if (a === "delete") get.push("get");
    else if (a === "-o" || a === "--grace-period" || a === "--timeout" || a === "--cascade") i++;
    else if (!DELETE_ONLY.test(a) && !(a.startsWith("-o") && !a.startsWith("--"))) get.push(a);
  }
  const r = Bun.spawnSync([kubectl, ...withContext([...get, "-o", "json"], target)], {
    stdout: "pipe",
    stderr: "pipe",
  });
  if (r.exitCode !== 0) return [];
  let doc: { kind?: string; items?: unknown[] };
  try {
    doc = JSON.parse(r.stdout.toString());
  } catch {
    return [];
  }
  const items = (Array.isArray(doc.items) ? doc.items : [doc]) as {
    kind?: string;
    metadata?: { name?: string; namespace?: string; labels?: Record<string, string> };
  }[];
  return items
    .filter((o) => (o.metadata?.labels?.[COMPARTMENT_LABEL] ?? "").toUpperCase() !== current)
    .map((o) => {
      const where = o.metadata?.namespace ? ` in namespace ${o.metadata.namespace}` : "";
      const compartment = o.metadata?.labels?.[COMPARTMENT_LABEL] ?? "no compartment label";
      return `svc: warning: deleting ${o.kind ?? "object"} ${o.metadata?.name ?? ""}${where}, of another compartment (${compartment}); current compartment: ${current}`;
    });
}
