import { readFileSync } from "node:fs";
import type { ActiveContext } from "../../lib/config/resolve.ts";
import { SvcError } from "../../lib/errors.ts";
import { injectMls } from "../../lib/kube/inject.ts";
import { type KubeTarget, withContext } from "../../lib/kube/kubectl.ts";
import { parseObjects, readSources, toYaml } from "../../lib/kube/manifests.ts";

/**
 * `svc apply` (4.5, 2.2): reads the manifests itself (-f files, directories, -R, URLs, stdin; -k through
 * `kubectl kustomize`), injects the compartment labels and annotations into every object and pod
 * template, then runs kubectl's own apply on the result (`-f -`) with every other flag the user gave,
 * so `--dry-run=client -o yaml` shows the injected objects. Returns kubectl's arguments and its input.
 */
export async function prepareApply(
  args: string[],
  active: ActiveContext,
  kubectl: string,
  target: KubeTarget,
): Promise<{ args: string[]; stdin: string }> {
  const files: string[] = [];
  const kustomize: string[] = [];
  let recursive = false;
  const rest: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i] as string;
    const take = (short: string, long: string, into: string[]): boolean => {
      if (a === short || a === long) {
        const v = args[++i];
        if (v === undefined) throw new SvcError("usage", `${a} needs a value`);
        into.push(v);
        return true;
      }
      if (a.startsWith(`${long}=`)) {
        into.push(a.slice(long.length + 1));
        return true;
      }
      return false;
    };
    if (take("-f", "--filename", files) || take("-k", "--kustomize", kustomize)) continue;
    if (a === "-R" || a === "--recursive" || a === "--recursive=true") recursive = true;
    else rest.push(a);
  }
  if (files.length === 0 && kustomize.length === 0)
    throw new SvcError("usage", "svc apply needs -f <file|url|dir|-> or -k <dir>");
  const sources = await readSources(files, recursive, () => readFileSync(0, "utf8"));
  for (const dir of kustomize) {
    const r = Bun.spawnSync([kubectl, ...withContext(["kustomize", dir], { ...target, namespace: "" })], {
      stdout: "pipe",
      stderr: "pipe",
    });
    if (r.exitCode !== 0) throw new SvcError("usage", `-k ${dir}: ${r.stderr.toString().trim()}`);
    sources.push({ name: `kustomization ${dir}`, text: r.stdout.toString() });
  }
  const objects = parseObjects(sources);
  if (objects.length === 0)
    throw new SvcError("usage", `no objects in ${[...files, ...kustomize].join(", ")}`);
  for (const o of objects) injectMls(o, active);
  return { args: [...rest, "-f", "-"], stdin: toYaml(objects) };
}
