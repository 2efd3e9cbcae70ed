/**
 * The audit log (docs/svc-config.md, "Audit log"): one JSON line per command with time, user, context,
 * compartment, command line, target objects, decision and exit status. `auditLog.level` filters: allowed
 * read-only commands are debug, allowed changes info, forced overrides warn, refusals and usage errors error.
 * Writing never stops a command: a full disk or an unwritable file gives one warning on stderr and the
 * command goes on.
 */
import { execFileSync } from "node:child_process";
import { appendFileSync, mkdirSync } from "node:fs";
import { homedir } from "node:os";
import { dirname } from "node:path";
import { AUDIT_LEVELS, type SvcConfig } from "./schema.ts";

export type Decision = "allowed" | "refused" | "forced" | "error";
export type AuditLevel = (typeof AUDIT_LEVELS)[number];

export interface AuditEntry {
  user: string;
  context: string;
  compartment: string;
  command: string[];
  targets: string[];
  decision: Decision;
  exitStatus: number;
  /** Commands that change nothing in the cluster (get, describe, logs) are logged at debug level. */
  readOnly?: boolean;
  /** `svc context use`: the context before the switch ("" when there was none). */
  previousContext?: string;
}

export function levelOf(e: Pick<AuditEntry, "decision" | "readOnly">): AuditLevel {
  if (e.decision === "refused" || e.decision === "error") return "error";
  if (e.decision === "forced") return "warn";
  return e.readOnly ? "debug" : "info";
}

/** Who ran the command: $USER, else $LOGNAME, else the account of the process (cron, services, containers). */
export function auditUser(env: Record<string, string | undefined> = process.env): string {
  return env.USER || env.LOGNAME || accountName();
}

/**
 * The effective user's name from the user database. Not os.userInfo(): under Bun its username is $USER, or
 * "unknown" without it (oven-sh/bun#39859). `id -un` also knows directory (LDAP, SSSD) accounts; should it
 * fail or hang (an unreachable directory), the numeric uid still names the account.
 */
function accountName(): string {
  const uid = String(process.geteuid?.() ?? "");
  try {
    const name = execFileSync("id", ["-un"], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
      timeout: 2_000,
    });
    return name.trim() || uid;
  } catch {
    return uid;
  }
}

export class AuditLog {
  private warned = false;

  constructor(
    private readonly settings: SvcConfig["auditLog"],
    private readonly warn: (message: string) => void,
    private readonly now: () => Date = () => new Date(),
  ) {}

  get path(): string {
    return this.settings.path.replace(/^~(?=\/|$)/, homedir());
  }

  /** Appends the entry if the log is enabled and its level passes; never throws. */
  record(entry: AuditEntry): void {
    if (!this.settings.enabled) return;
    const level = levelOf(entry);
    if (AUDIT_LEVELS.indexOf(level) < AUDIT_LEVELS.indexOf(this.settings.level)) return;
    const { readOnly: _, ...fields } = entry;
    const line = `${JSON.stringify({ time: this.now().toISOString(), level, ...fields })}\n`;
    try {
      mkdirSync(dirname(this.path), { recursive: true, mode: 0o700 });
      appendFileSync(this.path, line, { mode: 0o600 });
    } catch (e) {
      if (this.warned) return;
      this.warned = true;
      this.warn(
        `audit log ${this.path} not written (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}); the command went ahead`,
      );
    }
  }
}
