import type { FlagSpec } from "../proxy/flags.ts";

/**
 * Completion scripts for svc-proxy's Go-style flags (bash, zsh, fish), generated from its flag table:
 * flag names, the allowed values of enumerated flags, and file names after -config. (svc's own come
 * from `svc completion`, which builds on kubectl's.)
 */
export type Shell = "bash" | "zsh" | "fish";

const quote = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;

function bash(flags: readonly FlagSpec[]): string {
  const cases = flags
    .filter((f) => f.kind === "string")
    .map((f) => {
      const reply = f.values
        ? `COMPREPLY=($(compgen -W ${quote(f.values.join(" "))} -- "$cur"))`
        : `compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$cur"))`;
      return `    -${f.name} | --${f.name}) ${reply}; return ;;`;
    });
  const names = flags.map((f) => `-${f.name}`).join(" ");
  return `# bash completion for svc-proxy
_svc_proxy() {
  local cur=\${COMP_WORDS[COMP_CWORD]} prev=\${COMP_WORDS[COMP_CWORD-1]}
  case "$prev" in
${cases.join("\n")}
  esac
  COMPREPLY=($(compgen -W ${quote(names)} -- "$cur"))
}
complete -F _svc_proxy svc-proxy
`;
}

function zsh(flags: readonly FlagSpec[]): string {
  const specs = flags.map((f) => {
    const help = f.usage.replace(/[[\]:\\]/g, "\\$&");
    if (f.kind === "bool") return `    ${quote(`-${f.name}[${help}]`)}`;
    const action = f.values ? `(${f.values.join(" ")})` : "_files";
    return `    ${quote(`-${f.name}[${help}]:${f.name}:${action}`)}`;
  });
  return `#compdef svc-proxy
# zsh completion for svc-proxy
_arguments -s \\
${specs.join(" \\\n")}
`;
}

function fish(flags: readonly FlagSpec[]): string {
  const lines = flags.map((f) => {
    const base = `complete -c svc-proxy -o ${f.name} -d ${quote(f.usage)}`;
    if (f.kind === "bool") return base;
    return f.values ? `${base} -x -a ${quote(f.values.join(" "))}` : `${base} -r -F`;
  });
  return `# fish completion for svc-proxy\ncomplete -c svc-proxy -f\n${lines.join("\n")}\n`;
}

export function proxyCompletion(shell: Shell, flags: readonly FlagSpec[]): string {
  return { bash, zsh, fish }[shell](flags);
}
