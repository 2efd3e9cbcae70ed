import { afterAll, describe, expect, test } from "bun:test";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { SqliteNotaryStore } from "../../proxy/notary-service/records-sqlite.ts";
import { tempDir } from "../support/dev-api.ts";
import { BUN, spawnProc, stopAll } from "../support/proc.ts";

const dir = tempDir("svc-notary-store-");
afterAll(async () => {
  await stopAll();
  rmSync(dir, { recursive: true, force: true });
});

describe("notary database", () => {
  test("survives kill -9 in the middle of writes: no corruption, every committed write kept", async () => {
    const path = join(dir, "killed.db");
    for (let round = 0; round < 3; round++) {
      const first = round * 1_000_000 + 1;
      const writer = spawnProc([BUN, "tests/support/store-writer.ts", path, String(first)]);
      await writer.waitFor((l) => Number(l) >= first + 200, 30_000);
      writer.proc.kill("SIGKILL");
      await writer.exited;
      const committed = Math.max(...writer.lines.map(Number).filter(Number.isFinite));
      const store = SqliteNotaryStore.open(path);
      expect(store.integrityCheck()).toBe("ok");
      // Everything the writer reported as committed is there, with its receipt.
      expect(await store.exchanges(`r-${committed}`)).toHaveLength(1);
      expect((await store.receipt(String(committed).padStart(43, "0")))?.exchange.requestId).toBe(
        `r-${committed}`,
      );
      await store.close();
    }
  }, 120_000);

  test("a missing parent directory is a clear error; a newer schema is refused", async () => {
    expect(() => SqliteNotaryStore.open(join(dir, "no-such-dir", "n.db"))).toThrow(
      /notary.database.path: the directory .*no-such-dir of .* does not exist; create it first/,
    );
    const path = join(dir, "future.db");
    await SqliteNotaryStore.open(path).close();
    const { Database } = require("bun:sqlite") as typeof import("bun:sqlite");
    const db = new Database(path);
    db.run(`PRAGMA user_version = ${SqliteNotaryStore.VERSION + 1}`);
    db.close();
    expect(() => SqliteNotaryStore.open(path)).toThrow(/newer than this build's/);
  });

  test("another program's database (tables, schema 0) and a file that is no database are refused and left as they are", () => {
    const { Database } = require("bun:sqlite") as typeof import("bun:sqlite");
    const path = join(dir, "someone-elses.db");
    const other = new Database(path);
    other.run("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER)");
    other.close();
    const before = readFileSync(path);
    expect(() => SqliteNotaryStore.open(path)).toThrow(
      /notary.database.path: .*someone-elses.db is a database of another program .*; it is left as it is/,
    );
    expect(readFileSync(path).equals(before)).toBe(true);
    const text = join(dir, "notes.txt");
    writeFileSync(
      text,
      "not a database at all, but long enough to be read as a header by SQLite.\n".repeat(20),
    );
    expect(() => SqliteNotaryStore.open(text)).toThrow(
      /notary.database.path: cannot open .*notes.txt as a database/,
    );
  });

  test("reopening keeps the data and the WAL journal mode", async () => {
    const path = join(dir, "reopen.db");
    const a = SqliteNotaryStore.open(path);
    await a.putStatement("S".repeat(43), "a.b.c", "spiffe://t/x", "C".repeat(43));
    await a.close();
    const b = SqliteNotaryStore.open(path);
    expect((await b.statement("S".repeat(43)))?.jws).toBe("a.b.c");
    await b.close();
    const { Database } = require("bun:sqlite") as typeof import("bun:sqlite");
    const db = new Database(path);
    expect((db.query("PRAGMA journal_mode").get() as { journal_mode: string }).journal_mode).toBe("wal");
    db.close();
  });
});
