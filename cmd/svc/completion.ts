/**
 * `svc completion bash|zsh|fish` (docs/svc-config.md, "Shell completion"): kubectl's own completion script,
 * renamed for svc and asking svc (`svc __complete …`) for candidates, so that resource names come from the
 * current compartment context's cluster and namespace and svc's own commands are offered too. It is
 * registered for `svc` and for `kubectl`, so that `alias kubectl=svc` completes as well.
 */
import { defineCommand } from "citty";
import { SvcError } from "../../lib/errors.ts";
import { findKubectl } from "../../lib/kube/kubectl.ts";
import { action } from "./cli.ts";

const SHELLS = ["bash", "zsh", "fish"] as const;

const args = { shell: { type: "positional", description: "bash, zsh or fish", required: true } } as const;

export function svcCompletion(shell: (typeof SHELLS)[number], kubectlScript: string): string {
  let s = kubectlScript
    .replace(/\$\{words\[[01]\]\} __complete/g, "svc __complete")
    .replace(/\$args\[1\] __complete/g, "svc __complete")
    .replace(/kubectl/g, "svc");
  if (shell === "bash")
    s = s.replace(/complete -o default( -o nospace)? -F __start_svc svc/g, (m) => `${m} kubectl`);
  if (shell === "zsh") s = s.replace(/^compdef _svc svc$/gm, "compdef _svc svc kubectl");
  if (shell === "fish")
    s += `\n${s
      .split("\n")
      .filter((l) => l.startsWith("complete -c svc"))
      .map((l) => l.replace("complete -c svc", "complete -c kubectl"))
      .join("\n")}\n`;
  return s;
}

export default defineCommand({
  meta: { name: "completion", description: "Prints a shell completion script (bash, zsh or fish)" },
  args,
  run: action(args, (a) => {
    const shell = a.shell as (typeof SHELLS)[number];
    if (!SHELLS.includes(shell))
      throw new SvcError("usage", `unknown shell ${JSON.stringify(a.shell)} (allowed: ${SHELLS.join(", ")})`);
    const r = Bun.spawnSync([findKubectl(), "completion", shell], { stdout: "pipe", stderr: "pipe" });
    if (r.exitCode !== 0)
      throw new SvcError("usage", `kubectl completion ${shell} failed: ${r.stderr.toString().trim()}`);
    process.stdout.write(svcCompletion(shell, r.stdout.toString()));
  }),
});
