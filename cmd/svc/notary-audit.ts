import { SvcError } from "../../lib/errors.ts";
import type { BundleSource } from "../../lib/spiffe/bundle.ts";
import { checkLog } from "../../proxy/notary-service/log-check.ts";
import { openStore } from "../../proxy/notary-service/open-store.ts";

/**
 * `svc notary verify --database`: the consistency check svc-proxy runs at start-up, on a notary database
 * (an SQLite file, opened read-only, or a postgres:// URL with the password in PGPASSWORD): every record
 * against its leaf, the leaves against the signed tree heads. Problems are printed and make it fail
 * (exit 3).
 */
export async function auditLog(location: string, bundles: BundleSource, json: boolean): Promise<void> {
  const postgres = /^postgres(ql)?:\/\//.test(location);
  const store = await openStore(
    postgres
      ? { kind: "postgres", url: location, passwordFile: undefined, poolSize: 2 }
      : { kind: "sqlite", path: location },
    { readonly: true },
  );
  try {
    const check = await checkLog(store, bundles);
    if (json) process.stdout.write(`${JSON.stringify({ database: location, ...check }, null, 2)}\n`);
    else if (check.problems.length === 0)
      process.stdout.write(
        `${location}: the notary log is consistent: ${check.size} records, ${check.treeHeads} signed tree heads\n`,
      );
    if (check.problems.length > 0) {
      if (!json) for (const p of check.problems) process.stdout.write(`${p}\n`);
      throw new SvcError(
        "receipt",
        `${location}: the notary log failed its check: ${check.problems.length} problem${check.problems.length === 1 ? "" : "s"}`,
      );
    }
  } finally {
    await store.close();
  }
}
