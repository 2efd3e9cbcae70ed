import { defineCommand } from "citty";
import { AuditLog, auditUser, type Decision } from "../../lib/config/audit.ts";
import { type LoadedConfig, loadConfig, saveConfig } from "../../lib/config/file.ts";
import { configuredKubeconfig } from "../../lib/config/resolve.ts";
import {
  type CompartmentContext,
  compartmentLabel,
  findContext,
  partProblem,
  type SvcConfig,
} from "../../lib/config/schema.ts";
import { SvcError } from "../../lib/errors.ts";
import { findKubectl } from "../../lib/kube/kubectl.ts";
import { svcWarning } from "../say.ts";
import { action, outputArg, printStructured } from "./cli.ts";

/**
 * `svc context list|use|create|delete|current`: the compartment contexts of ~/.svc/config.yaml
 * (docs/svc-config.md).
 */
function notFound(name: string, known: string[]): SvcError {
  return new SvcError(
    "usage",
    `Context not found: ${JSON.stringify(name)} (known: ${known.join(", ") || "none; create one with svc context create"})`,
  );
}

const nameArg = { name: { type: "positional", description: "Context name", required: true } } as const;

const list = defineCommand({
  meta: { name: "list", description: "Lists the contexts" },
  args: outputArg,
  run: action(outputArg, async (a) => {
    const { config } = loadConfig(undefined, { warn: svcWarning });
    const structured = Object.entries(config.contexts)
      .sort(([x], [y]) => x.localeCompare(y))
      .map(([name, c]) => ({ name, current: name === config.currentContext, ...c }));
    if (await printStructured(a.output, structured)) return;
    const rows = [["CURRENT", "NAME", "COUNTRY", "SENSITIVITY", "COMPARTMENT", "KUBE-CONTEXT"]];
    for (const [name, c] of Object.entries(config.contexts).sort(([a], [b]) => a.localeCompare(b)))
      rows.push([
        name === config.currentContext ? "*" : "",
        name,
        c.country,
        c.sensitivity,
        c.compartment,
        c.kubeContext,
      ]);
    const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length))) ?? [];
    for (const r of rows)
      process.stdout.write(
        `${r.map((cell, i) => (i < r.length - 1 ? cell.padEnd((widths[i] ?? 0) + 3) : cell)).join("")}\n`,
      );
  }),
});

/**
 * A switch moves the user to another compartment, so it is audited (at info level) like a change; a failed
 * one is recorded as an error, in the context that stays current.
 */
function auditSwitch(
  loaded: LoadedConfig,
  name: string,
  decision: Decision,
  context: string,
  /** A context just created and made current (the first one). */
  created?: CompartmentContext,
): void {
  const { config } = loaded;
  const c = created ?? findContext(config, context);
  new AuditLog(config.auditLog, svcWarning).record({
    user: auditUser(),
    context,
    compartment: c ? compartmentLabel(c) : "",
    command: ["svc", "context", created ? "create" : "use", name],
    targets: [name],
    decision,
    exitStatus: decision === "allowed" ? 0 : 1,
    previousContext: config.currentContext,
  });
}

const use = defineCommand({
  meta: { name: "use", description: "Switches the current context" },
  args: nameArg,
  run: action(nameArg, (a) => {
    const loaded = loadConfig(undefined, { warn: svcWarning });
    try {
      if (!findContext(loaded.config, a.name)) throw notFound(a.name, Object.keys(loaded.config.contexts));
      loaded.doc.set("currentContext", a.name);
      saveConfig(loaded);
    } catch (e) {
      auditSwitch(loaded, a.name, "error", loaded.config.currentContext);
      throw e;
    }
    auditSwitch(loaded, a.name, "allowed", a.name);
    process.stdout.write(`Switched to context "${a.name}".\n`);
  }),
});

const current = defineCommand({
  meta: { name: "current", description: "Prints the current context name" },
  args: outputArg,
  run: action(outputArg, async (a) => {
    const { config } = loadConfig(undefined, { warn: svcWarning });
    if (!config.currentContext)
      throw new SvcError("usage", "no current context; set one with svc context use <name>");
    const c = findContext(config, config.currentContext);
    if (await printStructured(a.output, { name: config.currentContext, ...c })) return;
    process.stdout.write(`${config.currentContext}\n`);
  }),
});

const createArgs = {
  ...nameArg,
  country: { type: "string", description: "Country code (for example US, UK, AU, JP)", required: true },
  sensitivity: { type: "string", description: "Sensitivity (for example TS, S, C, U)", required: true },
  compartment: { type: "string", description: "Compartment name", required: true },
  "kube-context": { type: "string", description: "Kubernetes context to use", required: true },
  namespace: { type: "string", description: "Default namespace" },
} as const;

const create = defineCommand({
  meta: { name: "create", description: "Creates a context" },
  args: createArgs,
  run: action(createArgs, (a) => {
    const loaded = loadConfig(undefined, { mayCreate: true, warn: svcWarning });
    if (findContext(loaded.config, a.name))
      throw new SvcError(
        "usage",
        `context ${JSON.stringify(a.name)} already exists; delete it first or pick another name`,
      );
    const problems = (["country", "sensitivity", "compartment"] as const).flatMap((part) => {
      const why = partProblem(part, a[part]);
      return why ? [`--${part} ${why}`] : [];
    });
    const kubeContexts = kubeContextsOf(loaded.config);
    if (!kubeContexts.includes(a["kube-context"]))
      problems.push(
        `--kube-context ${JSON.stringify(a["kube-context"])}: no such context in your kubeconfig (known: ${kubeContexts.join(", ") || "none"}); add it with kubectl config set-context, or name one of these`,
      );
    if (problems.length > 0) throw new SvcError("usage", problems.join("; "));
    const context = {
      country: a.country.toUpperCase(),
      sensitivity: a.sensitivity.toUpperCase(),
      compartment: a.compartment.toUpperCase(),
      kubeContext: a["kube-context"],
      ...(a.namespace ? { namespace: a.namespace } : {}),
    };
    if (!loaded.doc.has("contexts") || loaded.doc.get("contexts") === null)
      loaded.doc.set("contexts", loaded.doc.createNode({}));
    loaded.doc.setIn(["contexts", a.name], context);
    // With no context current, the new one becomes current, as kubectl's first context does: svc never
    // holds contexts with none current unless one is deleted (then it says so and runs nothing).
    const first = !loaded.config.currentContext;
    if (first) loaded.doc.set("currentContext", a.name);
    saveConfig(loaded);
    if (first) auditSwitch(loaded, a.name, "allowed", a.name, context);
    process.stdout.write(
      `Context "${a.name}" created.${first ? ` It is the current context (there was none).` : ""}\n`,
    );
  }),
});

const remove = defineCommand({
  meta: { name: "delete", description: "Removes a context" },
  args: nameArg,
  run: action(nameArg, (a) => {
    const loaded = loadConfig(undefined, { warn: svcWarning });
    if (!findContext(loaded.config, a.name)) throw notFound(a.name, Object.keys(loaded.config.contexts));
    loaded.doc.deleteIn(["contexts", a.name]);
    if (loaded.config.currentContext === a.name) loaded.doc.set("currentContext", "");
    saveConfig(loaded);
    process.stdout.write(`Context "${a.name}" deleted.\n`);
  }),
});

export default defineCommand({
  meta: { name: "context", description: "Manage compartment contexts (~/.svc/config.yaml)" },
  subCommands: { list, use, current, create, delete: remove },
});

/**
 * The kube contexts kubectl knows, from the kubeconfig svc commands will use (KUBECONFIG, else the file's
 * `kubeconfig`, else kubectl's default): asked of kubectl, which merges and reads kubeconfigs its own way.
 */
function kubeContextsOf(config: SvcConfig): string[] {
  const file = configuredKubeconfig(config);
  const r = Bun.spawnSync(
    [findKubectl(), ...(file ? [`--kubeconfig=${file}`] : []), "config", "get-contexts", "-o", "name"],
    {
      stdout: "pipe",
      stderr: "pipe",
    },
  );
  if (r.exitCode !== 0)
    throw new SvcError(
      "kube_api",
      `cannot read your kube contexts (kubectl config get-contexts): ${r.stderr.toString().trim()}`,
    );
  return r.stdout.toString().split("\n").filter(Boolean);
}
