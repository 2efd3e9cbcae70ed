import { SvcError } from "../errors.ts";
import type { CommandLine } from "./grammar.ts";
import { type GlobalFlags, type Resolution, resolveKubeconfig } from "./kubeconfig.ts";
import { contextFlags, type KubeTarget, withContext } from "./kubectl.ts";
import { DATA_RESOURCES, listMetadata } from "./metadata.ts";
import { inCompartment, REFUSAL } from "./mls.ts";
import { getPod } from "./pods.ts";
import { coreTypeWord } from "./type-name.ts";

/** The cluster's authorization webhook refusing a read (proxy/admission/access.ts), in kubectl's error. */
const READ_REFUSED = new RegExp(
  `Cannot read [^\\n]*? (${REFUSAL.foreign} \\([^)\\n]*\\)|${REFUSAL.unlabeled})`,
);
const UNREADABLE = new RegExp(`svc admission: [^\\n]*? ${REFUSAL.unreadable}`);

/**
 * kubectl runs for svc's own checks, aimed at exactly the cluster target the user's command will use:
 * the user's own global flags (context, kubeconfig, cluster, server, token, user, `--as`, `--as-group`,
 * namespace, TLS options …) as kubectl read them, then the compartment context's defaults for what the
 * user did not give — the same rule the command itself runs with, in the same environment (so a
 * KUBECONFIG list is merged by kubectl, as for the command).
 */
/** Globals that change only kubectl's logging or profiling, never what it talks to. */
const NOT_TARGET = new Set(["v", "vmodule", "log-flush-frequency", "profile", "profile-output"]);

/** The flags that make kubectl act as someone else (docs/svc-guard.md, "Impersonation and tokens"). */
const IMPERSONATION = new Set(["as", "as-group", "as-uid"]);

/** A DNS subdomain, the shape of pod and namespace names: safe as one URL path segment. */
const DNS_NAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

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
  private readonly flags: GlobalFlags = new Map();
  private direct?: Resolution;

  constructor(
    readonly kubectl: string,
    readonly target: KubeTarget,
    private readonly line: CommandLine,
    /** The current compartment's label, for a refusal the cluster gave svc's own read. */
    private readonly current = "",
  ) {
    const uses = line.flags.filter((f) => f.global);
    for (const f of uses) this.flags.set(f.name, [...(this.flags.get(f.name) ?? []), f.value]);
    const forTarget = uses.filter((f) => !NOT_TARGET.has(f.name));
    this.globals = forTarget.map((f) => `--${f.name}=${f.value}`);
    this.given = new Set(forTarget.map((f) => f.name));
  }

  /** The same cluster target as the user themself: the command line without `--as`, `--as-group`, `--as-uid`. */
  withoutImpersonation(): Lookup {
    const flags = this.line.flags.filter((f) => !(f.global && IMPERSONATION.has(f.name)));
    return new Lookup(this.kubectl, this.target, { ...this.line, flags }, this.current);
  }

  /**
   * Pods by name, read straight from the API server when svc can resolve the cluster target exactly as
   * kubectl would (lib/kube/kubeconfig.ts) — one HTTPS request instead of a kubectl run — else through
   * kubectl. `namespace` as for args().
   */
  async pods(names: string[], namespace?: string): Promise<KubeObject[]> {
    if (!this.direct) this.direct = this.resolve();
    const ns = "ok" in this.direct ? (namespace ?? this.direct.ok.namespace) : "";
    if (!("ok" in this.direct) || ![ns, ...names].every((n) => DNS_NAME.test(n)))
      return this.objects(
        names.map((n) => `pod/${n}`),
        namespace,
      );
    const cluster = this.direct.ok;
    return Promise.all(
      names.map(async (name) => {
        const pod = (await getPod(cluster, ns, name)) as KubeObject | undefined;
        if (!pod) throw new SvcError("kube_api", `cannot check the compartment: pod ${ns}/${name} not found`);
        if (pod.kind !== "Pod" || pod.metadata?.name !== name)
          throw new SvcError(
            "kube_api",
            `cannot check the compartment: ${cluster.server} answered no pod ${name}`,
          );
        return pod;
      }),
    );
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

  /** The user's globals plus the context's flags the command gets (contextFlags: one rule for both). */
  private resolve(): Resolution {
    const flags = new Map(this.flags);
    for (const word of contextFlags(this.target, new Set(this.flags.keys()))) {
      const eq = word.indexOf("=");
      flags.set(word.slice(2, eq), [word.slice(eq + 1)]);
    }
    return resolveKubeconfig(flags);
  }

  /** The namespace the command names (`-n`), else the compartment context's; undefined when neither does. */
  namedNamespace(): string | undefined {
    return this.flags.get("namespace")?.at(-1) || this.target.namespace || undefined;
  }

  /**
   * The namespace a direct read resolved when neither the command line nor the compartment context named
   * one (it came from the kubeconfig's context, or is "default"): the command is given it too, so that
   * kubectl cannot settle on another.
   */
  resolvedNamespace(): string | undefined {
    if (!this.direct || !("ok" in this.direct) || this.flags.has("namespace") || this.target.namespace)
      return undefined;
    return this.direct.ok.namespace;
  }

  /**
   * The objects of `type` that `selectors` pick (`--selector=…`, `--field-selector=…`, `--all-namespaces`),
   * in the command's namespace. Secrets and ConfigMaps (metadata.ts) are listed as metadata only, straight
   * from the API server, when svc can resolve the target as kubectl would: svc never holds data it does
   * not print. Anything else, or a target svc cannot resolve, through kubectl (whole objects).
   */
  async listed(type: string, selectors: string[]): Promise<KubeObject[]> {
    const word = coreTypeWord(type) ?? "";
    const data = Object.hasOwn(DATA_RESOURCES, word) ? DATA_RESOURCES[word] : undefined;
    if (!this.direct) this.direct = this.resolve();
    const all = selectors.includes("--all-namespaces");
    const ns = "ok" in this.direct ? this.direct.ok.namespace : "";
    const value = (flag: string) =>
      selectors.filter((s) => s.startsWith(`--${flag}=`)).map((s) => s.slice(flag.length + 3));
    const plain = selectors.every((s) => s === "--all-namespaces" || /^--(selector|field-selector)=/.test(s));
    if (!data || !("ok" in this.direct) || !plain || (!all && !DNS_NAME.test(ns)))
      return this.objects([type, ...selectors, "--ignore-not-found"]);
    // kubectl joins repeated selectors with commas, as one selector.
    const labelSelector = value("selector").join(",");
    const fieldSelector = value("field-selector").join(",");
    return listMetadata(this.direct.ok, data, {
      ...(all ? {} : { namespace: ns }),
      ...(labelSelector ? { labelSelector } : {}),
      ...(fieldSelector ? { fieldSelector } : {}),
    });
  }

  /** `kubectl get … -o json`: the objects (a List's items, or the one object), or a kube_api error. */
  objects(words: string[], namespace?: string | null, stdin?: string): KubeObject[] {
    const r = this.run(["get", ...words, "-o", "json"], namespace, stdin);
    // The cluster's authorization webhook refused the read itself (docs/admission.md, "Reads"): that is
    // the answer, another compartment's object.
    const denied = READ_REFUSED.exec(r.err) ?? UNREADABLE.exec(r.err);
    if (r.code !== 0 && denied)
      throw new SvcError(
        "compartment",
        inCompartment(`${denied[0]} (the cluster refused svc's read)`, this.current),
      );
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
