/**
 * The schema of svc-proxy's SQLite files (the notary's records, the witness's logs, the MQTT buffer):
 * numbered migrations, the number applied kept in PRAGMA user_version. Each store names its own file and
 * setting in its errors; the rule of versions is this one.
 */
import type { Database } from "bun:sqlite";

/** One schema change: SQL statements, or code for a change SQL alone cannot make. */
export type Migration = string | ((db: Database) => void);

/** How many migrations the file has had: 0 for a new, empty file. */
export function schemaVersion(db: Database): number {
  return (db.query("PRAGMA user_version").get() as { user_version: number }).user_version;
}

/**
 * Whether the file at schema `version` belongs to another program. A store's file carries its
 * `applicationId` (PRAGMA application_id) from its first migration on, so a file at schema 0 must be
 * empty: no tables and no application id. A store that never set one (`applicationId` undefined) can only
 * tell that much.
 */
export function foreignFile(db: Database, version: number, applicationId?: number): boolean {
  const app = (db.query("PRAGMA application_id").get() as { application_id: number }).application_id;
  if (version !== 0) return applicationId !== undefined && app !== applicationId;
  const tables = (db.query("SELECT count(*) AS n FROM sqlite_master").get() as { n: number }).n;
  return tables > 0 || app !== 0;
}

/**
 * Why this build must not write a file at schema `version` (written by a newer build), or undefined when
 * the migrations can bring it up to date.
 */
export function newerSchema(version: number, migrations: readonly Migration[]): string | undefined {
  return version > migrations.length
    ? `schema version ${version}, newer than this build's ${migrations.length}`
    : undefined;
}

/**
 * Brings the file from schema `from` up to the last migration. Each step is a transaction of its own that
 * also records its number, so a process killed between two steps resumes at the next one.
 */
export function migrate(db: Database, migrations: readonly Migration[], from = schemaVersion(db)): void {
  for (let v = from; v < migrations.length; v++)
    db.transaction(() => {
      const step = migrations[v] as Migration;
      if (typeof step === "string") db.run(step);
      else step(db);
      db.run(`PRAGMA user_version = ${v + 1}`);
    })();
}
