import { defineCommand } from "citty";
import { loadConfig, saveConfig } from "../../lib/config/file.ts";
import { SvcError } from "../../lib/errors.ts";
import { action } from "./cli.ts";

/** `svc context list|use|create|delete|current` (specification 4.5): the compartment contexts of 2.1. */
function notFound(name: string, known: string[]): SvcError {
  return new SvcError(
    "usage",
    `Context not found: ${JSON.stringify(name)} (known: ${known.join(", ") || "none; create one with svc context create"})`,
  );
}

const nameArg = { name: { type: "positional", description: "Context name", required: true } } as const;

const list = defineCommand({
  meta: { name: "list", description: "Lists the contexts" },
  args: {},
  run: action({}, () => {
    const { config } = loadConfig();
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

const use = defineCommand({
  meta: { name: "use", description: "Switches the current context" },
  args: nameArg,
  run: action(nameArg, (a) => {
    const loaded = loadConfig();
    if (!loaded.config.contexts[a.name]) throw notFound(a.name, Object.keys(loaded.config.contexts));
    loaded.doc.set("currentContext", a.name);
    saveConfig(loaded);
    process.stdout.write(`Switched to context "${a.name}".\n`);
  }),
});

const current = defineCommand({
  meta: { name: "current", description: "Prints the current context name" },
  args: {},
  run: action({}, () => {
    const { config } = loadConfig();
    if (!config.currentContext)
      throw new SvcError("usage", "no current context; set one with svc context use <name>");
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
    const loaded = loadConfig();
    if (loaded.config.contexts[a.name])
      throw new SvcError(
        "usage",
        `context ${JSON.stringify(a.name)} already exists; delete it first or pick another name`,
      );
    for (const [flag, value] of [
      ["--country", a.country],
      ["--sensitivity", a.sensitivity],
      ["--compartment", a.compartment],
    ] as const)
      if (!/^[A-Za-z0-9]+$/.test(value))
        throw new SvcError("usage", `${flag} ${JSON.stringify(value)}: letters and digits only`);
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
    saveConfig(loaded);
    process.stdout.write(`Context "${a.name}" created.\n`);
  }),
});

const remove = defineCommand({
  meta: { name: "delete", description: "Removes a context" },
  args: nameArg,
  run: action(nameArg, (a) => {
    const loaded = loadConfig();
    if (!loaded.config.contexts[a.name]) throw notFound(a.name, Object.keys(loaded.config.contexts));
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
