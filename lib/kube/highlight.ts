/**
 * `svc describe` (docs/svc-config.md, "svc describe"): kubectl's description with the MLS labels and
 * annotations highlighted — on a terminal only, and never when NO_COLOR is set (https://no-color.org) or
 * output is piped.
 */
const MLS = /(svc\.io\/compartment|mls\.svc\.dev\/[\w.-]+)(=|:\s*)(\S+)/g;
const BOLD_YELLOW = "\u001b[1;33m";
const RESET = "\u001b[0m";

export function highlightMls(text: string): string {
  return text.replace(
    MLS,
    (_, key: string, sep: string, value: string) => `${BOLD_YELLOW}${key}${sep}${value}${RESET}`,
  );
}

export function wantsColor(isTty: boolean, env: Record<string, string | undefined> = process.env): boolean {
  return isTty && !env.NO_COLOR && env.TERM !== "dumb";
}
