import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { delimiter, dirname, isAbsolute, join, resolve } from "node:path";

/**
 * The cluster, user and namespace kubectl would use, resolved the way kubectl's client configuration
 * does it (client-go clientcmd): the kubeconfig from --kubeconfig, else the KUBECONFIG list (files merged,
 * the first file to name a cluster, user or context wins; missing files skipped), else ~/.kube/config;
 * the context from --context, else current-context; --cluster, --user, --server, --token, TLS and
 * impersonation flags over the kubeconfig's entries; paths relative to the file that names them.
 *
 * Only what svc reproduces exactly is resolved. Anything else — exec and auth-provider plugins, basic
 * auth, proxies, an unknown field, a file that cannot be read — gives `unsupported` with the reason, and
 * the caller asks kubectl itself.
 */
/** Where and how svc reaches the cluster API for its direct reads. */
export interface KubeCredentials {
  server: string;
  token?: string;
  ca?: string;
  cert?: string;
  key?: string;
  insecure: boolean;
  /** Impersonation (`--as`, or `as` in the kubeconfig's user): sent as Impersonate-* headers. */
  impersonate?: { user: string; groups: string[]; uid?: string };
  /** Where the credentials came from, for error messages. */
  from: string;
}

export interface Resolved extends KubeCredentials {
  namespace: string;
}

export type Resolution = { ok: Resolved } | { unsupported: string };

/** Global kubectl flags by long name (the last value; `as-group` every value). */
export type GlobalFlags = Map<string, string[]>;

/** Flags that do not change what a GET is sent to or as whom. */
const HARMLESS = new Set([
  "context",
  "kubeconfig",
  "namespace",
  "cluster",
  "user",
  "server",
  "token",
  "as",
  "as-group",
  "as-uid",
  "certificate-authority",
  "client-certificate",
  "client-key",
  "request-timeout",
  "cache-dir",
  "v",
  "vmodule",
  "log-flush-frequency",
  "profile",
  "profile-output",
  "warnings-as-errors",
  "match-server-version",
  "disable-compression",
]);
const CLUSTER_FIELDS = new Set([
  "server",
  "certificate-authority",
  "certificate-authority-data",
  "insecure-skip-tls-verify",
  "disable-compression",
  "extensions",
]);
const USER_FIELDS = new Set([
  "token",
  "tokenFile",
  "client-certificate",
  "client-certificate-data",
  "client-key",
  "client-key-data",
  "as",
  "as-groups",
  "as-uid",
  "extensions",
]);

type Entry = { body: Record<string, unknown>; file: string };

interface Merged {
  clusters: Map<string, Entry>;
  users: Map<string, Entry>;
  contexts: Map<string, Entry>;
  currentContext?: string;
  files: string[];
}

function load(files: string[], explicit: boolean): Merged | string {
  const merged: Merged = { clusters: new Map(), users: new Map(), contexts: new Map(), files };
  for (const file of files) {
    if (!existsSync(file)) {
      if (explicit) return `kubeconfig ${file} does not exist`;
      continue;
    }
    let doc: Record<string, unknown>;
    try {
      // Bun's YAML parser: merge keys as kubectl reads them, and fast on a cold start (this runs before
      // every exec). Its one YAML 1.2 difference that matters here, yes/on as booleans, is read below.
      const text = readFileSync(file, "utf8");
      // Merge keys, anchors, aliases and tags are where YAML readers disagree: left to kubectl.
      if (/<<|[!&*]/.test(text)) return `kubeconfig ${file} uses YAML merge keys, anchors or tags`;
      doc = (Bun.YAML.parse(text) ?? {}) as Record<string, unknown>;
      if (Array.isArray(doc)) return `kubeconfig ${file} holds several documents`;
    } catch (e) {
      return `cannot read kubeconfig ${file}: ${(e as Error).message.split("\n")[0]}`;
    }
    for (const [key, into, field] of [
      ["clusters", merged.clusters, "cluster"],
      ["users", merged.users, "user"],
      ["contexts", merged.contexts, "context"],
    ] as const) {
      const list = doc[key];
      if (list === undefined || list === null) continue;
      if (!Array.isArray(list)) return `kubeconfig ${file}: ${key} is not a list`;
      for (const item of list as { name?: unknown }[]) {
        const name = item?.name;
        const body = (item as Record<string, unknown>)?.[field];
        if (typeof name !== "string" || into.has(name)) continue;
        into.set(name, { body: (body ?? {}) as Record<string, unknown>, file });
      }
    }
    const current = doc["current-context"];
    if (merged.currentContext === undefined && typeof current === "string" && current !== "")
      merged.currentContext = current;
  }
  return merged;
}

/** The kubeconfig files kubectl reads: --kubeconfig, else the KUBECONFIG list, else ~/.kube/config. */
function kubeconfigFiles(
  flag: string | undefined,
  env: Record<string, string | undefined>,
): { files: string[]; explicit: boolean } {
  if (flag) return { files: [flag], explicit: true };
  const list = (env.KUBECONFIG ?? "").split(delimiter).filter(Boolean);
  if (list.length > 0) return { files: [...new Set(list)], explicit: false };
  return { files: [join(homedir(), ".kube", "config")], explicit: false };
}

export function resolveKubeconfig(
  flags: GlobalFlags,
  env: Record<string, string | undefined> = process.env,
  cwd = process.cwd(),
): Resolution {
  const unsupported = (why: string): Resolution => ({ unsupported: why });
  for (const name of flags.keys()) if (!HARMLESS.has(name)) return unsupported(`the flag --${name}`);
  // In a pod, kubectl may take the namespace from POD_NAMESPACE or the service account: left to kubectl.
  if (env.POD_NAMESPACE !== undefined || env.KUBERNETES_SERVICE_HOST !== undefined)
    return unsupported("in-cluster configuration");
  // Without HOME, kubectl looks for .kube/config in the current directory.
  if (!env.HOME) return unsupported("HOME is not set");
  const flag = (name: string) => flags.get(name)?.at(-1);
  const { files, explicit } = kubeconfigFiles(flag("kubeconfig"), env);
  const merged = load(
    files.map((f) => resolve(cwd, f)),
    explicit,
  );
  if (typeof merged === "string") return unsupported(merged);
  const contextName = flag("context") || merged.currentContext;
  if (!contextName) return unsupported("no context");
  const context = merged.contexts.get(contextName);
  if (!context) return unsupported(`context ${contextName} not found`);
  const clusterName = flag("cluster") || String(context.body.cluster ?? "");
  const userName = flag("user") || String(context.body.user ?? "");
  const cluster = merged.clusters.get(clusterName);
  const user = merged.users.get(userName) ?? { body: {}, file: "" };
  if (!cluster && !flag("server")) return unsupported(`cluster ${clusterName} not found`);
  const c = cluster?.body ?? {};
  for (const k of Object.keys(c)) if (!CLUSTER_FIELDS.has(k)) return unsupported(`the cluster field ${k}`);
  for (const k of Object.keys(user.body)) if (!USER_FIELDS.has(k)) return unsupported(`the user field ${k}`);
  const server = flag("server") || String(c.server ?? "");
  if (!/^https?:\/\//.test(server)) return unsupported(`the server ${JSON.stringify(server)}`);
  const read = (data: unknown, path: unknown, base: string): string | undefined => {
    if (typeof data === "string" && data !== "") return Buffer.from(data, "base64").toString("utf8");
    if (typeof path === "string" && path !== "")
      return readFileSync(isAbsolute(path) ? path : join(base, path), "utf8");
    return undefined;
  };
  try {
    const clusterDir = dirname(cluster?.file ?? join(cwd, "x"));
    const userDir = dirname(user.file || join(cwd, "x"));
    const insecure = yaml11True(c["insecure-skip-tls-verify"]);
    const ca = flag("certificate-authority")
      ? read(undefined, flag("certificate-authority"), cwd)
      : read(c["certificate-authority-data"], c["certificate-authority"], clusterDir);
    if (insecure && ca) return unsupported("a CA together with insecure-skip-tls-verify");
    const certFlag = flag("client-certificate");
    const keyFlag = flag("client-key");
    const cert = certFlag
      ? read(undefined, certFlag, cwd)
      : read(user.body["client-certificate-data"], user.body["client-certificate"], userDir);
    const key = keyFlag
      ? read(undefined, keyFlag, cwd)
      : read(user.body["client-key-data"], user.body["client-key"], userDir);
    if (user.body.token && user.body.tokenFile) return unsupported("both token and tokenFile");
    if (!cert !== !key) return unsupported("a client certificate without its key, or a key without one");
    const token = flag("token") || (read(undefined, user.body.tokenFile, userDir)?.trim() ?? user.body.token);
    const asUser = flag("as") || (user.body.as as string | undefined);
    const groups = flags.get("as-group") ?? ((user.body["as-groups"] as string[] | undefined) || []);
    const asUid = flag("as-uid") || (user.body["as-uid"] as string | undefined);
    if (!asUser && (groups.length > 0 || asUid)) return unsupported("impersonation without --as");
    // Bun's fetch joins repeated headers into one "a, b" line, which the API server reads as one group.
    if (groups.length > 1) return unsupported("more than one impersonated group");
    const namespace = flag("namespace") || String(context.body.namespace ?? "") || "default";
    return {
      ok: {
        server: server.replace(/\/$/, ""),
        insecure,
        namespace,
        from: `kubeconfig ${files.join(delimiter)} (context ${contextName})`,
        ...(typeof token === "string" && token !== "" ? { token } : {}),
        ...(ca ? { ca } : {}),
        ...(cert ? { cert } : {}),
        ...(key ? { key } : {}),
        ...(asUser ? { impersonate: { user: asUser, groups, ...(asUid ? { uid: asUid } : {}) } } : {}),
      },
    };
  } catch (e) {
    return unsupported((e as Error).message);
  }
}

/** A YAML 1.1 true (kubectl's YAML): true, or y, yes, on in any of their spellings. */
function yaml11True(v: unknown): boolean {
  return v === true || (typeof v === "string" && /^(y|Y|yes|Yes|YES|on|On|ON|true|True|TRUE)$/.test(v));
}
