import { afterAll, describe, expect, test } from "bun:test";
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type AuditEntry, AuditLog, auditUser, levelOf } from "../../lib/config/audit.ts";
import { tempDir } from "../support/dev-api.ts";

const unexpectedWarning = (m: string) => {
  throw new Error(`unexpected warning: ${m}`);
};

const dir = tempDir("svc-audit-");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const entry = (over: Partial<AuditEntry> = {}): AuditEntry => ({
  user: "alice",
  context: "us-ts-alpha",
  compartment: "US-TS-ALPHA",
  command: ["svc", "exec", "web-0", "--", "ls"],
  targets: ["pods/web-0"],
  decision: "allowed",
  exitStatus: 0,
  ...over,
});

describe("audit log", () => {
  test("writes one JSON line per command with every field", () => {
    const path = join(dir, "a", "audit.log");
    const log = new AuditLog(
      { enabled: true, path, level: "info" },
      unexpectedWarning,
      () => new Date("2026-11-21T12:00:00Z"),
    );
    log.record(entry());
    log.record(entry({ decision: "refused", exitStatus: 1 }));
    const lines = readFileSync(path, "utf8")
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(lines).toHaveLength(2);
    expect(lines[0]).toEqual({
      time: "2026-11-21T12:00:00.000Z",
      level: "info",
      user: "alice",
      context: "us-ts-alpha",
      compartment: "US-TS-ALPHA",
      command: ["svc", "exec", "web-0", "--", "ls"],
      targets: ["pods/web-0"],
      decision: "allowed",
      exitStatus: 0,
    });
    expect(lines[1].level).toBe("error");
  });

  test("the level filters: at warn, only forced and refused commands are kept", () => {
    const path = join(dir, "warn.log");
    const log = new AuditLog({ enabled: true, path, level: "warn" }, unexpectedWarning);
    log.record(entry({ readOnly: true }));
    log.record(entry());
    log.record(entry({ decision: "forced" }));
    const levels = readFileSync(path, "utf8")
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l).level);
    expect(levels).toEqual(["warn"]);
  });

  test("a usage error is logged at error level, like a refusal; previousContext is written when given", () => {
    expect(levelOf({ decision: "error" })).toBe("error");
    const path = join(dir, "error.log");
    const log = new AuditLog({ enabled: true, path, level: "error" }, unexpectedWarning);
    log.record(entry({ decision: "allowed", previousContext: "uk-s-bravo" }));
    log.record(entry({ decision: "error", exitStatus: 1, previousContext: "uk-s-bravo" }));
    const lines = readFileSync(path, "utf8")
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: "error", decision: "error", previousContext: "uk-s-bravo" });
  });

  test("disabled writes nothing", () => {
    const path = join(dir, "off.log");
    new AuditLog({ enabled: false, path, level: "debug" }, unexpectedWarning).record(entry());
    expect(existsSync(path)).toBe(false);
  });

  test("an unwritable log warns once and never throws", () => {
    const locked = join(dir, "locked");
    mkdirSync(locked);
    chmodSync(locked, 0o500);
    const warnings: string[] = [];
    // Root ignores directory permissions; a path under a regular file fails for everyone.
    writeFileSync(join(dir, "plain-file"), "");
    const path = process.getuid?.() === 0 ? join(dir, "plain-file", "x.log") : join(locked, "x.log");
    const log = new AuditLog({ enabled: true, path, level: "debug" }, (m) => warnings.push(m));
    log.record(entry());
    log.record(entry());
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain("the command went ahead");
  });
});

describe("the audit log's user", () => {
  test("is $USER, else $LOGNAME (an empty value counts as unset)", () => {
    expect(auditUser({ USER: "alice", LOGNAME: "bob" })).toBe("alice");
    expect(auditUser({ LOGNAME: "bob" })).toBe("bob");
    expect(auditUser({ USER: "", LOGNAME: "bob" })).toBe("bob");
  });

  test("without either, is the account of the process from the user database", () => {
    const uid = process.geteuid?.() ?? 0;
    const entry = Bun.spawnSync(["getent", "passwd", String(uid)]).stdout.toString();
    const name = entry.split(":")[0] || String(uid);
    expect(auditUser({})).toBe(name);
    expect(auditUser({ USER: "", LOGNAME: "" })).toBe(name);
  });
});
