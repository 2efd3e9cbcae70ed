import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { foreignFile, type Migration, migrate, newerSchema, schemaVersion } from "../../lib/sqlite-schema.ts";

/** The schema rule every svc-proxy SQLite file follows (lib/sqlite-schema.ts), on in-memory databases. */
const tables = (db: Database) =>
  (
    db.query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all() as { name: string }[]
  ).map((r) => r.name);

const STEPS: Migration[] = [
  "CREATE TABLE a (x INTEGER); CREATE TABLE b (y INTEGER);",
  (db) => db.run("INSERT INTO a VALUES (1), (2)"),
  "ALTER TABLE a ADD COLUMN z TEXT",
];

describe("numbered migrations in PRAGMA user_version", () => {
  test("a new file gets every step and the version of the last", () => {
    const db = new Database(":memory:");
    expect(schemaVersion(db)).toBe(0);
    migrate(db, STEPS);
    expect(schemaVersion(db)).toBe(3);
    expect(tables(db)).toEqual(["a", "b"]);
    expect(db.query("SELECT count(*) AS n FROM a").get()).toEqual({ n: 2 });
  });

  test("a file part of the way gets only the steps after its version; an up-to-date one is left alone", () => {
    const db = new Database(":memory:");
    migrate(db, STEPS.slice(0, 1));
    expect(schemaVersion(db)).toBe(1);
    migrate(db, STEPS);
    expect(db.query("SELECT count(*) AS n FROM a").get()).toEqual({ n: 2 });
    migrate(db, STEPS);
    expect(db.query("SELECT count(*) AS n FROM a").get()).toEqual({ n: 2 });
    expect(schemaVersion(db)).toBe(3);
  });

  test("a step that fails leaves the file at the step before, with nothing of the failed step", () => {
    const db = new Database(":memory:");
    const failing: Migration[] = [
      STEPS[0] as Migration,
      (d) => {
        d.run("INSERT INTO a VALUES (7)");
        throw new Error("step 2 fails");
      },
    ];
    expect(() => migrate(db, failing)).toThrow("step 2 fails");
    expect(schemaVersion(db)).toBe(1);
    expect(db.query("SELECT count(*) AS n FROM a").get()).toEqual({ n: 0 });
  });

  test("a file of a newer build is named, one this build can upgrade is not", () => {
    expect(newerSchema(4, STEPS)).toBe("schema version 4, newer than this build's 3");
    for (const v of [0, 1, 3]) expect(newerSchema(v, STEPS)).toBeUndefined();
  });

  test("another program's file: tables or an application id at schema 0, or another application id after", () => {
    const db = new Database(":memory:");
    expect(foreignFile(db, 0, 7)).toBe(false);
    db.run("PRAGMA application_id = 9");
    expect(foreignFile(db, 0, 7)).toBe(true);
    db.run("PRAGMA application_id = 0");
    db.run("CREATE TABLE t (x INTEGER)");
    expect(foreignFile(db, 0, 7)).toBe(true);
    expect(foreignFile(db, 0)).toBe(true);
    db.run("PRAGMA application_id = 7");
    expect(foreignFile(db, 1, 7)).toBe(false);
    expect(foreignFile(db, 1, 8)).toBe(true);
    // A store without an application id can tell only a file at schema 0.
    expect(foreignFile(db, 1)).toBe(false);
  });
});
