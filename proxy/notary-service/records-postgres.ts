/**
 * The notary database on PostgreSQL (Bun's built-in client), shared by any number of central proxy
 * replicas: each serves what any of them wrote. Writes are committed in transactions that first lock
 * the log's head row, so appends from all replicas form one log; writes waiting together share one
 * transaction (group commit). Migrations run under an advisory lock, so
 * replicas starting together migrate once. Connection failures are retried with backoff for about two
 * seconds; then the operation fails and the notary answers 503, having issued nothing it did not store.
 */
import { SQL } from "bun";
import { isSvcError, SvcError } from "../../lib/errors.ts";
import type { LeafKind } from "../../lib/notary-objects/log.ts";
import { append, encodeFrontier, type Hash, leafHash, rootOf } from "../../lib/notary-objects/merkle.ts";
import {
  certificateFromRow,
  type Exchange,
  exchangeFromRow,
  headFrontier,
  KEPT_COSIGNATURES,
  type LoggedRecord,
  type NotaryStore,
  receiptFromRow,
  recordLeaf,
  type StoredObject,
  type StoredReceipt,
  statementFromRow,
  type TreeHeadRow,
  type Witnessed,
} from "./store.ts";

const MIGRATION_LOCK = 0x5_7c_0a_21;
const MIGRATIONS: string[] = [
  `CREATE TABLE certificates (
     id TEXT PRIMARY KEY, der BYTEA NOT NULL, spiffe_id TEXT NOT NULL, not_after BIGINT NOT NULL,
     created_at BIGINT NOT NULL);
   CREATE TABLE statements (
     id TEXT PRIMARY KEY, jws TEXT NOT NULL, subject TEXT NOT NULL, certificate_id TEXT NOT NULL,
     created_at BIGINT NOT NULL);
   CREATE TABLE exchanges (
     id BIGSERIAL PRIMARY KEY, request_id TEXT NOT NULL, statement_id TEXT NOT NULL,
     level TEXT NOT NULL, method TEXT NOT NULL, path TEXT NOT NULL, request_headers TEXT NOT NULL,
     request_body BYTEA NOT NULL, status INTEGER NOT NULL, response_headers TEXT NOT NULL,
     response_body BYTEA NOT NULL, created_at BIGINT NOT NULL);
   CREATE INDEX exchanges_request_id ON exchanges (request_id);
   CREATE TABLE receipts (
     id TEXT PRIMARY KEY, jws TEXT NOT NULL, statement_id TEXT NOT NULL, exchange_id BIGINT NOT NULL,
     created_at BIGINT NOT NULL);
   CREATE TABLE log_leaves (
     idx BIGINT PRIMARY KEY, kind TEXT NOT NULL, ref TEXT NOT NULL, hash BYTEA NOT NULL, UNIQUE (kind, ref));
   CREATE TABLE log_nodes (
     level INTEGER NOT NULL, idx BIGINT NOT NULL, hash BYTEA NOT NULL, PRIMARY KEY (level, idx));
   CREATE TABLE log_head (
     id INTEGER PRIMARY KEY CHECK (id = 1), size BIGINT NOT NULL, frontier BYTEA NOT NULL);
   INSERT INTO log_head (id, size, frontier) VALUES (1, 0, ''::bytea);
   CREATE TABLE tree_heads (
     size BIGINT PRIMARY KEY, root BYTEA NOT NULL, jws TEXT NOT NULL, created_at BIGINT NOT NULL);`,
  // Streamed receipts, found by the Svc-Stream-ID their caller was given (the receipt records it too).
  "CREATE TABLE receipt_streams (stream_id TEXT PRIMARY KEY, receipt_id TEXT NOT NULL)",
  // Witnesses' cosignatures of kept tree heads (docs/notary.md, "Witnesses").
  `CREATE TABLE cosignatures (
     size BIGINT NOT NULL, witness TEXT NOT NULL, jws TEXT NOT NULL, created_at BIGINT NOT NULL,
     PRIMARY KEY (size, witness))`,
];

/** SQLSTATE classes and client codes of failures worth retrying: the connection, not the statement. */
function transient(e: unknown): boolean {
  const err = e as { code?: string; errno?: string };
  if (
    typeof err.code === "string" &&
    /^ERR_POSTGRES_(CONNECTION_|IDLE_TIMEOUT|LIFETIME_TIMEOUT)/.test(err.code)
  )
    return true;
  return typeof err.errno === "string" && /^(08|57P0[123]|40001|40P01|53300)/.test(err.errno);
}

const RETRY_MS = [50, 100, 200, 400, 800];

type Tx = InstanceType<typeof SQL>;
type WriteBody<T> = (
  tx: Tx,
  appendLeaf: (kind: LeafKind, ref: string, data: Uint8Array) => Promise<void>,
) => Promise<T>;
interface Pending {
  body: WriteBody<unknown>;
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
}
/** Writes committed together at most (a bound on one transaction's size and time). */
const MAX_BATCH = 64;
type Row = Record<string, unknown>;

export class PostgresNotaryStore implements NotaryStore {
  private constructor(
    private readonly sql: Tx,
    readonly location: string,
  ) {}

  /** Connects, and migrates under an advisory lock. Throws SvcError("usage") when it cannot. */
  static async open(o: {
    url: string;
    password?: string;
    poolSize: number;
    /** Only read: check the schema version instead of migrating (audits). */
    readonly?: boolean;
  }): Promise<PostgresNotaryStore> {
    const u = new URL(o.url);
    const location = `${u.protocol}//${u.username ? `${u.username}@` : ""}${u.host}${u.pathname}`;
    const sql = new SQL({
      url: o.url,
      ...(o.password !== undefined ? { password: o.password } : {}),
      max: o.poolSize,
      idleTimeout: 30,
      connectionTimeout: 5,
    });
    const store = new PostgresNotaryStore(sql, location);
    try {
      await store.retrying(() => (o.readonly ? store.checkVersion() : store.migrate()));
      store.connected = Promise.resolve();
    } catch (e) {
      // Unreachable: a proxy keeps trying in the background, its notary answering 503 meanwhile. A
      // refusal (a wrong password, a newer schema) or an audit ends here.
      if (o.readonly || !(transient(e) || isSvcError(e, "notary_unavailable"))) {
        await sql.close().catch(() => {});
        throw new SvcError("usage", `notary.database.url: ${location}: ${(e as Error).message}`);
      }
      store.unreachable = (e as Error).message;
      store.connected = store.keepConnecting();
    }
    return store;
  }

  /** Resolves once the schema is in place; rejects when the server refuses for good. */
  connected: Promise<void> = Promise.resolve();
  /** Why the store has not been reachable since it was opened; undefined once it was. */
  private unreachable: string | undefined;

  private async keepConnecting(): Promise<void> {
    for (let wait = 1000; ; wait = Math.min(wait * 2, 5000)) {
      await Bun.sleep(wait);
      try {
        await this.migrate();
        this.unreachable = undefined;
        return;
      } catch (e) {
        if (!transient(e)) {
          this.unreachable = `refused: ${(e as Error).message}`;
          throw new SvcError("usage", `notary.database.url: ${this.location}: ${(e as Error).message}`);
        }
        this.unreachable = (e as Error).message;
      }
    }
  }

  unavailable(): string | undefined {
    return this.unreachable;
  }

  private checkReachable(): void {
    if (this.unreachable !== undefined)
      throw new SvcError(
        "notary_unavailable",
        `PostgreSQL at ${this.location} has not been reachable since the proxy started (${this.unreachable}); still trying`,
      );
  }

  /** The schema version this build writes. */
  static readonly VERSION = MIGRATIONS.length;

  private async checkVersion(): Promise<void> {
    const [row] = await this.sql`SELECT version FROM svc_notary_schema`.catch(() => [undefined]);
    const version = row ? Number(row.version) : 0;
    if (version !== MIGRATIONS.length)
      throw new Error(`schema version ${version}, this build reads ${MIGRATIONS.length}`);
  }

  private async migrate(): Promise<void> {
    await this.sql.begin(async (tx) => {
      await tx`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK})`;
      await tx`CREATE TABLE IF NOT EXISTS svc_notary_schema (version INTEGER NOT NULL)`;
      const [row] = await tx`SELECT version FROM svc_notary_schema`;
      const version = row ? Number(row.version) : 0;
      if (version > MIGRATIONS.length)
        throw new Error(
          `schema version ${version} is newer than this build's ${MIGRATIONS.length}; use a newer svc-proxy`,
        );
      for (let v = version; v < MIGRATIONS.length; v++) await tx.unsafe(MIGRATIONS[v] as string);
      if (!row) await tx`INSERT INTO svc_notary_schema (version) VALUES (${MIGRATIONS.length})`;
      else await tx`UPDATE svc_notary_schema SET version = ${MIGRATIONS.length}`;
    });
  }

  /** Runs `op`, again after a connection failure, with backoff; then gives up with the last error. */
  private async retrying<T>(op: () => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await op();
      } catch (e) {
        const wait = RETRY_MS[attempt];
        if (!transient(e) || wait === undefined) {
          if (transient(e))
            throw new SvcError(
              "notary_unavailable",
              `PostgreSQL at ${this.location} is unreachable: ${(e as Error).message}`,
            );
          throw e;
        }
        await Bun.sleep(wait);
      }
    }
  }

  /**
   * A write. Writes waiting together are committed in one transaction (group commit): one lock of the
   * log's head row, one commit, for all of them; each caller learns its outcome only after that commit.
   * When a batch fails for a reason other than the connection, its writes are tried one by one, so that
   * one bad write fails alone.
   */
  private write<T>(body: WriteBody<T>): Promise<T> {
    this.checkReachable();
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ body, resolve, reject } as Pending);
      if (!this.flushing) void this.flush();
    });
  }

  private readonly queue: Pending[] = [];
  private flushing = false;

  private async flush(): Promise<void> {
    this.flushing = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.splice(0, MAX_BATCH);
        try {
          const results = await this.commit(batch);
          for (const [i, w] of batch.entries()) w.resolve(results[i]);
        } catch (e) {
          if (batch.length === 1 || transient(e) || isSvcError(e)) for (const w of batch) w.reject(e);
          else
            for (const w of batch)
              await this.commit([w]).then(
                ([r]) => w.resolve(r),
                (err) => w.reject(err),
              );
        }
      }
    } finally {
      this.flushing = false;
    }
  }

  /** One transaction for `batch`: the head row locked, the records written, the leaves and nodes added. */
  private commit(batch: Pending[]): Promise<unknown[]> {
    return this.retrying(() =>
      this.sql.begin(async (tx) => {
        const [head] = await tx`SELECT size, frontier FROM log_head WHERE id = 1 FOR UPDATE`;
        let size = Number(head?.size);
        let frontier = headFrontier(size, head?.frontier as Uint8Array);
        const leaves: { idx: number; kind: string; ref: string; hash: Uint8Array }[] = [];
        const nodes: { level: number; idx: number; hash: Uint8Array }[] = [];
        const appendLeaf = async (kind: LeafKind, ref: string, data: Uint8Array) => {
          const hash = leafHash(data);
          const next = append(frontier, size, hash);
          leaves.push({ idx: size, kind, ref, hash });
          for (const n of next.nodes) nodes.push({ level: n.level, idx: n.index, hash: n.hash });
          size += 1;
          frontier = next.frontier;
        };
        const out: unknown[] = [];
        for (const w of batch) out.push(await w.body(tx as unknown as Tx, appendLeaf));
        if (leaves.length > 0) await tx`INSERT INTO log_leaves ${tx(leaves)}`;
        if (nodes.length > 0) await tx`INSERT INTO log_nodes ${tx(nodes)}`;
        await tx`UPDATE log_head SET size = ${size}, frontier = ${encodeFrontier(frontier)} WHERE id = 1`;
        return out;
      }),
    );
  }

  private read<T>(op: (sql: Tx) => Promise<T>): Promise<T> {
    this.checkReachable();
    return this.retrying(() => op(this.sql));
  }

  putCertificate(id: string, der: Uint8Array, spiffeId: string, notAfter: Date): Promise<void> {
    return this.write(async (tx, appendLeaf) => {
      const inserted = await tx`INSERT INTO certificates (id, der, spiffe_id, not_after, created_at)
        VALUES (${id}, ${der}, ${spiffeId}, ${Math.floor(notAfter.getTime() / 1000)}, ${Date.now()})
        ON CONFLICT (id) DO NOTHING RETURNING id`;
      if (inserted.length === 1)
        await appendLeaf("certificate", id, recordLeaf("certificate", id, { der }) as Uint8Array);
    });
  }

  putStatement(id: string, jws: string, subject: string, certificateId: string): Promise<void> {
    return this.write(async (tx, appendLeaf) => {
      const inserted = await tx`INSERT INTO statements (id, jws, subject, certificate_id, created_at)
        VALUES (${id}, ${jws}, ${subject}, ${certificateId}, ${Date.now()})
        ON CONFLICT (id) DO NOTHING RETURNING id`;
      if (inserted.length === 1)
        await appendLeaf("statement", id, recordLeaf("statement", id, { jws }) as Uint8Array);
    });
  }

  logExchange(x: Exchange, receipt?: StoredReceipt): Promise<number> {
    return this.write(async (tx, appendLeaf) => {
      if (receipt) {
        // A retry after a commit whose answer was lost finds the receipt stored: done, nothing twice.
        const [done] = await tx`SELECT exchange_id FROM receipts WHERE id = ${receipt.id}`;
        if (done) return Number(done.exchange_id);
      }
      const [row] = await tx`INSERT INTO exchanges (request_id, statement_id, level, method, path,
          request_headers, request_body, status, response_headers, response_body, created_at)
        VALUES (${x.requestId}, ${x.statementId}, ${x.level}, ${x.method}, ${x.path},
          ${JSON.stringify(x.requestHeaders)}, ${x.requestBody}, ${x.status},
          ${JSON.stringify(x.responseHeaders)}, ${x.responseBody}, ${Date.now()})
        RETURNING id`;
      const id = Number(row?.id);
      await appendLeaf(
        "exchange",
        String(id),
        recordLeaf("exchange", String(id), { exchange: x }) as Uint8Array,
      );
      if (receipt) {
        await tx`INSERT INTO receipts (id, jws, statement_id, exchange_id, created_at)
          VALUES (${receipt.id}, ${receipt.jws}, ${x.statementId}, ${id}, ${Date.now()})`;
        await appendLeaf(
          "receipt",
          receipt.id,
          recordLeaf("receipt", receipt.id, { jws: receipt.jws }) as Uint8Array,
        );
        if (receipt.streamId)
          await tx`INSERT INTO receipt_streams (stream_id, receipt_id) VALUES (${receipt.streamId}, ${receipt.id})`;
      }
      return id;
    });
  }

  async statement(
    id: string,
  ): Promise<(StoredObject & { subject: string; certificateId: string }) | undefined> {
    const [r] = await this.read((sql) => sql`SELECT * FROM statements WHERE id = ${id}`);
    return r ? statementFromRow(r) : undefined;
  }

  async certificate(
    id: string,
  ): Promise<{ id: string; der: Uint8Array; spiffeId: string; notAfter: Date } | undefined> {
    const [r] = await this.read((sql) => sql`SELECT * FROM certificates WHERE id = ${id}`);
    return r ? certificateFromRow(r) : undefined;
  }

  async receipt(
    id: string,
  ): Promise<(StoredObject & { statementId: string; exchange: Exchange }) | undefined> {
    const [r] = await this.read(
      (sql) => sql`SELECT r.id AS receipt_id, r.jws, r.created_at AS receipt_created_at, x.*
        FROM receipts r JOIN exchanges x ON x.id = r.exchange_id WHERE r.id = ${id}`,
    );
    return r ? receiptFromRow(r) : undefined;
  }

  async streamReceipt(streamId: string): Promise<string | undefined> {
    const [r] = await this.read(
      (sql) => sql`SELECT receipt_id FROM receipt_streams WHERE stream_id = ${streamId}`,
    );
    return r ? String(r.receipt_id) : undefined;
  }

  async exchanges(requestId: string): Promise<Exchange[]> {
    const rows = await this.read(
      (sql) => sql`SELECT * FROM exchanges WHERE request_id = ${requestId} ORDER BY id`,
    );
    return [...rows].map(exchangeFromRow);
  }

  async head(): Promise<{ size: number; root: Hash }> {
    const [h] = await this.read((sql) => sql`SELECT size, frontier FROM log_head WHERE id = 1`);
    return { size: Number(h?.size), root: rootOf(headFrontier(Number(h?.size), h?.frontier as Uint8Array)) };
  }

  async leafIndex(kind: LeafKind, ref: string): Promise<number | undefined> {
    const [r] = await this.read(
      (sql) => sql`SELECT idx FROM log_leaves WHERE kind = ${kind} AND ref = ${ref}`,
    );
    return r ? Number(r.idx) : undefined;
  }

  async node(level: number, index: number): Promise<Hash> {
    const [r] = await this.read((sql) =>
      level === 0
        ? sql`SELECT hash FROM log_leaves WHERE idx = ${index}`
        : sql`SELECT hash FROM log_nodes WHERE level = ${level} AND idx = ${index}`,
    );
    if (!r) throw new SvcError("notary", `the notary log has no node ${level}/${index}`);
    return r.hash as Hash;
  }

  async latestTreeHead(): Promise<TreeHeadRow | undefined> {
    const [r] = await this.read(
      (sql) => sql`SELECT size, root, jws FROM tree_heads ORDER BY size DESC LIMIT 1`,
    );
    return r ? { size: Number(r.size), root: r.root, jws: r.jws } : undefined;
  }

  async treeHead(size: number): Promise<TreeHeadRow | undefined> {
    const [r] = await this.read((sql) => sql`SELECT size, root, jws FROM tree_heads WHERE size = ${size}`);
    return r ? { size: Number(r.size), root: r.root, jws: r.jws } : undefined;
  }

  async putTreeHead(h: TreeHeadRow): Promise<void> {
    await this.read(
      (sql) => sql`INSERT INTO tree_heads (size, root, jws, created_at)
        VALUES (${h.size}, ${h.root}, ${h.jws}, ${Date.now()}) ON CONFLICT (size) DO NOTHING`,
    );
  }

  async leaves(from: number, limit: number): Promise<LoggedRecord[]> {
    const rows = await this.read(
      (
        sql,
      ) => sql`SELECT l.idx, l.kind, l.ref, l.hash, c.der, s.jws AS statement_jws, r.jws AS receipt_jws, x.*
        FROM log_leaves l
        LEFT JOIN certificates c ON l.kind = 'certificate' AND c.id = l.ref
        LEFT JOIN statements s ON l.kind = 'statement' AND s.id = l.ref
        LEFT JOIN receipts r ON l.kind = 'receipt' AND r.id = l.ref
        LEFT JOIN exchanges x ON x.id = (CASE WHEN l.kind = 'exchange' THEN l.ref END)::bigint
        WHERE l.idx >= ${from} ORDER BY l.idx LIMIT ${limit}`,
    );
    return [...rows].map((r: Row) => {
      const kind = r.kind as LeafKind;
      const data = recordLeaf(kind, r.ref as string, {
        der: r.der as Uint8Array | null,
        jws: (kind === "statement" ? r.statement_jws : r.receipt_jws) as string | null,
        exchange: r.request_id !== null && r.request_id !== undefined ? exchangeFromRow(r) : null,
      });
      return { index: Number(r.idx), kind, ref: r.ref as string, hash: r.hash as Hash, data };
    });
  }

  async putCosignature(size: number, witness: string, jws: string): Promise<void> {
    await this.read(
      (sql) => sql`INSERT INTO cosignatures (size, witness, jws, created_at)
        VALUES (${size}, ${witness}, ${jws}, ${Date.now()})
        ON CONFLICT (size, witness) DO UPDATE SET jws = excluded.jws, created_at = excluded.created_at`,
    );
    await this.read(
      (sql) => sql`DELETE FROM cosignatures WHERE witness = ${witness} AND size NOT IN
        (SELECT size FROM cosignatures WHERE witness = ${witness}
         ORDER BY created_at DESC, size DESC LIMIT ${KEPT_COSIGNATURES})`,
    );
  }

  async cosignedHead(
    index: number,
    need: Witnessed,
  ): Promise<{ head: TreeHeadRow; cosignatures: string[] } | undefined> {
    const by = need.by ? JSON.stringify(need.by) : null;
    const [h] = await this.read(
      // From the cosignatures (a few per witness), not the tree heads (one per push round).
      (sql) => sql`SELECT t.size, t.root, t.jws FROM tree_heads t WHERE t.size =
        (SELECT size FROM cosignatures WHERE size > ${index} AND size IN (SELECT size FROM tree_heads)
           AND (${by}::text IS NULL OR witness IN (SELECT jsonb_array_elements_text(${by}::text::jsonb)))
         GROUP BY size HAVING count(*) >= ${Math.max(need.count, 1)} ORDER BY size DESC LIMIT 1)`,
    );
    if (!h) return undefined;
    const rows = await this.read(
      (sql) => sql`SELECT jws FROM cosignatures WHERE size = ${h.size}
        AND (${by}::text IS NULL OR witness IN (SELECT jsonb_array_elements_text(${by}::text::jsonb)))
        ORDER BY witness`,
    );
    return {
      head: { size: Number(h.size), root: h.root as Hash, jws: h.jws as string },
      cosignatures: [...rows].map((r: Row) => r.jws as string),
    };
  }

  async treeHeads(): Promise<TreeHeadRow[]> {
    const rows = await this.read((sql) => sql`SELECT size, root, jws FROM tree_heads ORDER BY size`);
    return [...rows].map((r: Row) => ({ size: Number(r.size), root: r.root as Hash, jws: r.jws as string }));
  }

  async unlogged(): Promise<{ kind: LeafKind; ref: string }[]> {
    const rows = await this.read(
      (sql) => sql`SELECT 'certificate' AS kind, id AS ref FROM certificates c
          WHERE NOT EXISTS (SELECT 1 FROM log_leaves l WHERE l.kind = 'certificate' AND l.ref = c.id)
        UNION ALL SELECT 'statement', id FROM statements s
          WHERE NOT EXISTS (SELECT 1 FROM log_leaves l WHERE l.kind = 'statement' AND l.ref = s.id)
        UNION ALL SELECT 'exchange', id::text FROM exchanges x
          WHERE NOT EXISTS (SELECT 1 FROM log_leaves l WHERE l.kind = 'exchange' AND l.ref = x.id::text)
        UNION ALL SELECT 'receipt', id FROM receipts r
          WHERE NOT EXISTS (SELECT 1 FROM log_leaves l WHERE l.kind = 'receipt' AND l.ref = r.id)`,
    );
    return [...rows].map((r: Row) => ({ kind: r.kind as LeafKind, ref: r.ref as string }));
  }

  async close(): Promise<void> {
    await this.sql.close();
  }
}
