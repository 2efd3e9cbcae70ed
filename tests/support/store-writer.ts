/**
 * Writes exchanges (with receipts) into a notary database as fast as it can, printing the number of
 * each committed write, until it is killed. tests/integration/notary-store.test.ts kills it with SIGKILL.
 *
 *   bun tests/support/store-writer.ts <database> <first number>
 */
import { SqliteNotaryStore } from "../../proxy/notary-service/records-sqlite.ts";

const store = SqliteNotaryStore.open(process.argv[2] as string);
const body = new Uint8Array(64 * 1024).fill(120);
for (let i = Number(process.argv[3] ?? 1); ; i++) {
  await store.logExchange(
    {
      requestId: `r-${i}`,
      statementId: "S".repeat(43),
      level: "signRequest",
      method: "POST",
      path: "/v1/chat/completions",
      requestHeaders: { "content-type": "application/json" },
      requestBody: body,
      status: 200,
      responseHeaders: {},
      responseBody: body,
    },
    { id: `${String(i).padStart(43, "0")}`, jws: "x.y.z" },
  );
  process.stdout.write(`${i}\n`);
  if (i % 50 === 0) await Bun.sleep(0);
}
