import type { ArgDef, CommandDef, Resolvable } from "citty";
import type { FlagSpec } from "../proxy/flags.ts";

/**
 * Manual pages (roff, section 1) rendered from the same definitions that print `--help`, so the two
 * never disagree: svc's citty command tree, svc-proxy's flag table.
 */

/** Text escaped for roff: backslashes, hyphens that are options, and lines starting with . or '. */
export function roff(text: string): string {
  return text
    .replace(/\\/g, "\\e")
    .replace(/-/g, "\\-")
    .replace(/^([.'])/gm, "\\&$1");
}

function header(name: string, version: string, date: string, summary: string): string[] {
  return [
    `.TH ${name.toUpperCase()} 1 "${date}" "${name} ${roff(version)}" "User Commands"`,
    ".SH NAME",
    `${roff(name)} \\- ${roff(summary)}`,
  ];
}

async function resolve<T>(r: Resolvable<T> | undefined): Promise<T | undefined> {
  if (r === undefined) return undefined;
  return typeof r === "function" ? await (r as () => T | Promise<T>)() : await r;
}

function option(name: string, def: ArgDef): string[] {
  if (def.type === "positional") return [];
  const alias = "alias" in def && def.alias ? [def.alias].flat().map((a) => `\\-${roff(a)}, `) : [];
  const value = def.type === "boolean" ? "" : ` \\fI${roff(name.split("-").at(-1) ?? "value")}\\fR`;
  const dflt =
    "default" in def && def.default !== undefined ? ` (default: ${roff(String(def.default))})` : "";
  return [
    ".TP",
    `\\fB${alias.join("")}\\-\\-${roff(name)}\\fR${value}`,
    `${roff(def.description ?? "")}${dflt}`,
  ];
}

/** One section per command that runs, subcommands in the order they are defined. */
async function commandSections(path: string[], cmd: CommandDef): Promise<string[]> {
  const meta = await resolve(cmd.meta);
  const args = (await resolve(cmd.args)) ?? {};
  const subs = (await resolve(cmd.subCommands)) ?? {};
  const out: string[] = [];
  if (path.length > 0 && cmd.run) {
    const positionals = Object.entries(args)
      .filter(([, d]) => d.type === "positional")
      .map(([n, d]) => (d.required === false ? `[${n}]` : n));
    out.push(".SS", `\\fB${roff(["svc", ...path].join(" "))}\\fR ${roff(positionals.join(" "))}`);
    out.push(roff(meta?.description ?? ""));
    const options = Object.entries(args).flatMap(([n, d]) => option(n, d));
    if (options.length > 0) out.push(".RS", ...options, ".RE");
  }
  for (const [name, sub] of Object.entries(subs)) {
    const def = await resolve(sub as Resolvable<CommandDef>);
    if (def) out.push(...(await commandSections([...path, name], def)));
  }
  return out;
}

export async function svcManual(root: CommandDef, version: string, date: string): Promise<string> {
  const meta = await resolve(root.meta);
  return `${[
    ...header("svc", version, date, meta?.description ?? ""),
    ".SH SYNOPSIS",
    "\\fBsvc\\fR \\fIcommand\\fR [\\fIflags\\fR]",
    ".br",
    "\\fBsvc\\fR \\fIkubectl-command\\fR [\\fIkubectl-flags\\fR]",
    ".SH DESCRIPTION",
    roff(
      "svc is a drop-in wrapper around kubectl for clusters that hold multi-level-security workloads. " +
        "It knows your compartment context (country, sensitivity, compartment), adds the MLS labels and " +
        "annotations on apply, shows a COMPARTMENT column on get, and refuses access to pods of another " +
        "compartment. Any command that is not one of svc's own below goes to kubectl, so `alias kubectl=svc` " +
        "works.",
    ),
    ".SH COMMANDS",
    ...(await commandSections([], root)),
    ".SH EXIT STATUS",
    roff(
      "Commands passed to kubectl exit with kubectl's status. svc's own exit 0 on success and 1 on a usage or " +
        "network error; svc curl exits 2 when the workload statement is missing or does not verify, 3 when the " +
        "receipt is missing or does not verify, and 4 for an HTTP error status.",
    ),
    ".SH ENVIRONMENT",
    ".TP",
    "\\fBSPIFFE_ENDPOINT_SOCKET\\fR",
    roff("The Workload API socket when --spiffe-socket-path is not given."),
    ".TP",
    "\\fBSVC_KUBECTL\\fR",
    roff(
      "The kubectl to run (a path, or a name on PATH); by default the first kubectl on PATH that is not svc.",
    ),
    ".TP",
    "\\fBSVC_DEBUG\\fR",
    roff("true prints stack traces with errors, as --log-stacktrace does."),
    ".SH FILES",
    ".TP",
    "\\fI~/.svc/config.yaml\\fR",
    roff("Compartment contexts (svc context)."),
    ".SH SEE ALSO",
    "\\fBsvc-proxy\\fR(1), \\fBkubectl\\fR(1)",
  ].join("\n")}\n`;
}

export function proxyManual(flags: readonly FlagSpec[], version: string, date: string): string {
  const options = flags.flatMap((f) => {
    const value = f.kind === "string" ? ` \\fI${f.values ? roff(f.values.join("|")) : "value"}\\fR` : "";
    const dflt = f.default !== undefined ? ` (default: ${roff(f.default)})` : "";
    return [".TP", `\\fB\\-${roff(f.name)}\\fR${value}`, `${roff(f.usage)}${dflt}`];
  });
  return `${[
    ...header("svc-proxy", version, date, "SPIFFE mutual-TLS proxy for HTTP, TCP and MQTT"),
    ".SH SYNOPSIS",
    "\\fBsvc-proxy\\fR \\-config \\fIpath\\fR [\\fIflags\\fR]",
    ".SH DESCRIPTION",
    roff(
      "svc-proxy carries HTTP, TCP and MQTT over mutual TLS with SPIFFE identities from the Workload API " +
        "(SPIRE), restricts peers by SPIFFE ID patterns, and applies middlewares: a chat-completions filter, " +
        "a notary that issues signed workload statements and receipts, notary query routes, a diagnostic " +
        "middleware and an MQTT publish buffer. It also serves the cluster's compartment admission webhook. " +
        "Flags follow Go conventions: -name value, -name=value or --name=value. " +
        "Configuration changes apply on restart; SIGTERM drains, a second SIGTERM exits at once.",
    ),
    ".SH OPTIONS",
    ...options,
    ".SH ENVIRONMENT",
    ".TP",
    "\\fBSVC_PROXY_CONFIG\\fR",
    roff("The configuration as YAML or JSON text, used when -config is not given."),
    ".TP",
    "\\fBSPIFFE_ENDPOINT_SOCKET\\fR",
    roff("The Workload API socket when the configuration names none."),
    ".SH EXIT STATUS",
    roff(
      "0 after a clean shutdown or a valid -check; 1 for an invalid configuration, a usage error or a fatal error.",
    ),
    ".SH SEE ALSO",
    "\\fBsvc\\fR(1)",
  ].join("\n")}\n`;
}
