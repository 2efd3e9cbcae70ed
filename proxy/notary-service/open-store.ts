import { readFileSync } from "node:fs";
import { SvcError } from "../../lib/errors.ts";
import type { NotaryDatabase } from "../config/types.ts";
import type { NotaryStore } from "./store.ts";

/**
 * Opens the notary's store: the SQLite file, or PostgreSQL with the password from password_file, else
 * from PGPASSWORD (never from the configuration). Only the store in use is loaded.
 */
export async function openStore(d: NotaryDatabase, o: { readonly?: boolean } = {}): Promise<NotaryStore> {
  if (d.kind === "sqlite") {
    const { SqliteNotaryStore } = await import("./records-sqlite.ts");
    return SqliteNotaryStore.open(d.path, o);
  }
  let password = process.env.PGPASSWORD;
  if (d.passwordFile) {
    try {
      password = readFileSync(d.passwordFile, "utf8").replace(/\r?\n$/, "");
    } catch (e) {
      throw new SvcError(
        "usage",
        `notary.database.password_file: cannot read ${d.passwordFile} (${(e as NodeJS.ErrnoException).code})`,
      );
    }
  }
  const { PostgresNotaryStore } = await import("./records-postgres.ts");
  return PostgresNotaryStore.open({
    url: d.url,
    poolSize: d.poolSize,
    ...(password !== undefined ? { password } : {}),
  });
}
