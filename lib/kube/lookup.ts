import { SvcError } from "../errors.ts";
import type { CommandLine } from "./grammar.ts";
import { type KubeTarget, withContext } from "./kubectl.ts";

/**
 * kubectl runs for svc's own checks, aimed at exactly the cluster target the user's command will use:
 * the user's own global flags (context, kubeconfig, cluster, server, token, user, `--as`, `--as-group`,
 * namespace, TLS options …) as kubectl read them, then the compartment context's defaults for what the
 * user did not give — the same rule the command itself runs with, in the same environment (so a
 * KUBECONFIG list is merged by kubectl, as for the command).
 */
/** Globals that change only kubectl's logging or profiling, never what it talks to. */
const NOT_TARGET = new Set(["v", "vmodule", "log-flush-frequency", "profile", "profile-output"]);

export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: {
    name?: string;
    namespace?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  spec?: Record<string, unknown>;
  items?: KubeObject[];
}

export class Lookup {
  private readonly globals: string[];
  private readonly given: Set<string>;

  constructor(
    readonly kubectl: string,
    readonly target: KubeTarget,
    line: CommandLine,
  ) {
    const uses = line.flags.filter((f) => f.global && !NOT_TARGET.has(f.name));
    this.globals = uses.map((f) => `--${f.name}=${f.value}`);
    this.given = new Set(uses.map((f) => f.name));
  }

  /**
   * kubectl's arguments for a check. `namespace`: undefined keeps the command's namespace, a string
   * replaces it (`kubectl cp ns/pod:…`), null drops it (cluster-scoped questions).
   */
  args(words: string[], namespace?: string | null): string[] {
    if (namespace === undefined) return withContext([...words, ...this.globals], this.target, this.given);
    const globals = this.globals.filter((g) => !g.startsWith("--namespace="));
    const given = new Set([...this.given].filter((g) => g !== "namespace"));
    const args = withContext([...words, ...globals], { ...this.target, namespace: "" }, given);
    return namespace === null ? args : [...args, `--namespace=${namespace}`];
  }

  run(
    words: string[],
    namespace?: string | null,
    stdin?: string,
  ): { code: number; out: string; err: string } {
    const r = Bun.spawnSync([this.kubectl, ...this.args(words, namespace)], {
      stdout: "pipe",
      stderr: "pipe",
      ...(stdin !== undefined ? { stdin: new TextEncoder().encode(stdin) } : {}),
    });
    return { code: r.exitCode ?? 1, out: r.stdout.toString(), err: r.stderr.toString() };
  }

  /** `kubectl get … -o json`: the objects (a List's items, or the one object), or a kube_api error. */
  objects(words: string[], namespace?: string | null, stdin?: string): KubeObject[] {
    const r = this.run(["get", ...words, "-o", "json"], namespace, stdin);
    if (r.code !== 0)
      throw new SvcError(
        "kube_api",
        `cannot check the compartment: kubectl get ${words.join(" ")}: ${r.err.trim() || `exit status ${r.code}`}`,
      );
    if (r.out.trim() === "") return [];
    let doc: KubeObject;
    try {
      doc = JSON.parse(r.out) as KubeObject;
    } catch {
      throw new SvcError(
        "kube_api",
        `cannot check the compartment: kubectl get ${words.join(" ")} printed no JSON`,
      );
    }
    return Array.isArray(doc.items) ? doc.items : [doc];
  }
}
