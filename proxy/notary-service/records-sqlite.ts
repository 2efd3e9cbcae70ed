/**
 * The notary database in one SQLite file (bun:sqlite, WAL), for a single replica. WAL with
 * synchronous=NORMAL never corrupts on a killed process; a committed transaction survives it. Schema
 * changes are numbered migrations recorded in PRAGMA user_version; migration 2 adds the log and appends
 * every record already stored to it.
 */
import { Database } from "bun:sqlite";
import { existsSync } from "node:fs";
import { dirname } from "node:path";
import { SvcError } from "../../lib/errors.ts";
import type { LeafKind } from "../../lib/notary-objects/log.ts";
import { append, encodeFrontier, type Hash, leafHash, rootOf } from "../../lib/notary-objects/merkle.ts";
import { foreignFile, type Migration, migrate, newerSchema, schemaVersion } from "../../lib/sqlite-schema.ts";
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

const MIGRATIONS: Migration[] = [
  (db) =>
    db.run(`CREATE TABLE certificates (
     id TEXT PRIMARY KEY, der BLOB NOT NULL, spiffe_id TEXT NOT NULL, not_after INTEGER NOT NULL,
     created_at INTEGER NOT NULL);
   CREATE TABLE statements (
     id TEXT PRIMARY KEY, jws TEXT NOT NULL, subject TEXT NOT NULL, certificate_id TEXT NOT NULL,
     created_at INTEGER NOT NULL);
   CREATE TABLE exchanges (
     id INTEGER PRIMARY KEY AUTOINCREMENT, request_id TEXT NOT NULL, statement_id TEXT NOT NULL,
     level TEXT NOT NULL, method TEXT NOT NULL, path TEXT NOT NULL, request_headers TEXT NOT NULL,
     request_body BLOB NOT NULL, status INTEGER NOT NULL, response_headers TEXT NOT NULL,
     response_body BLOB NOT NULL, created_at INTEGER NOT NULL);
   CREATE INDEX exchanges_request_id ON exchanges (request_id);
   CREATE TABLE receipts (
     id TEXT PRIMARY KEY, jws TEXT NOT NULL, statement_id TEXT NOT NULL, exchange_id INTEGER NOT NULL,
     created_at INTEGER NOT NULL);`),
  (db) => {
    db.run(`CREATE TABLE log_leaves (
       idx INTEGER PRIMARY KEY, kind TEXT NOT NULL, ref TEXT NOT NULL, hash BLOB NOT NULL);
     CREATE UNIQUE INDEX log_leaves_record ON log_leaves (kind, ref);
     CREATE TABLE log_nodes (
       level INTEGER NOT NULL, idx INTEGER NOT NULL, hash BLOB NOT NULL, PRIMARY KEY (level, idx));
     CREATE TABLE log_head (
       id INTEGER PRIMARY KEY CHECK (id = 1), size INTEGER NOT NULL, frontier BLOB NOT NULL);
     INSERT INTO log_head (id, size, frontier) VALUES (1, 0, x'');
     CREATE TABLE tree_heads (
       size INTEGER PRIMARY KEY, root BLOB NOT NULL, jws TEXT NOT NULL, created_at INTEGER NOT NULL);`);
    // What an earlier version stored joins the log in the order it was written.
    const rows = db
      .query(
        `SELECT 'certificate' AS kind, id AS ref, created_at FROM certificates
         UNION ALL SELECT 'statement', id, created_at FROM statements
         UNION ALL SELECT 'exchange', CAST(id AS TEXT), created_at FROM exchanges
         UNION ALL SELECT 'receipt', id, created_at FROM receipts
         ORDER BY created_at, kind, ref`,
      )
      .all() as { kind: LeafKind; ref: string }[];
    for (const r of rows) appendLeaf(db, r.kind, r.ref, recordData(db, r.kind, r.ref) as Uint8Array);
  },
  // Streamed receipts, found by the Svc-Stream-ID their caller was given (the receipt records it too).
  (db) => db.run("CREATE TABLE receipt_streams (stream_id TEXT PRIMARY KEY, receipt_id TEXT NOT NULL)"),
  // Witnesses' cosignatures of kept tree heads (docs/notary.md, "Witnesses").
  (db) =>
    db.run(`CREATE TABLE cosignatures (
       size INTEGER NOT NULL, witness TEXT NOT NULL, jws TEXT NOT NULL, created_at INTEGER NOT NULL,
       PRIMARY KEY (size, witness))`),
];

/** Appends a record's leaf inside the caller's transaction. */
function appendLeaf(db: Database, kind: LeafKind, ref: string, data: Uint8Array): void {
  const head = db.query("SELECT size, frontier FROM log_head WHERE id = 1").get() as {
    size: number;
    frontier: Uint8Array;
  };
  const hash = leafHash(data);
  const next = append(headFrontier(head.size, head.frontier), head.size, hash);
  db.query("INSERT INTO log_leaves (idx, kind, ref, hash) VALUES (?, ?, ?, ?)").run(
    head.size,
    kind,
    ref,
    hash,
  );
  const node = db.query("INSERT INTO log_nodes (level, idx, hash) VALUES (?, ?, ?)");
  for (const n of next.nodes) node.run(n.level, n.index, n.hash);
  db.query("UPDATE log_head SET size = ?, frontier = ? WHERE id = 1").run(
    head.size + 1,
    encodeFrontier(next.frontier),
  );
}

/** The leaf bytes of a stored record as it is now, or undefined when it is gone. */
function recordData(db: Database, kind: LeafKind, ref: string): Uint8Array | undefined {
  const one = (sql: string, key: string | number) => db.query(sql).get(key) as Row | null;
  switch (kind) {
    case "certificate":
      return recordLeaf(kind, ref, {
        der: one("SELECT der FROM certificates WHERE id = ?", ref)?.der as Uint8Array,
      });
    case "statement":
      return recordLeaf(kind, ref, {
        jws: one("SELECT jws FROM statements WHERE id = ?", ref)?.jws as string,
      });
    case "receipt":
      return recordLeaf(kind, ref, { jws: one("SELECT jws FROM receipts WHERE id = ?", ref)?.jws as string });
    case "exchange": {
      const r = one("SELECT * FROM exchanges WHERE id = ?", Number(ref));
      return recordLeaf(kind, ref, { exchange: r ? exchangeFromRow(r) : null });
    }
  }
}

export class SqliteNotaryStore implements NotaryStore {
  readonly connected = Promise.resolve();

  unavailable(): string | undefined {
    return undefined;
  }

  private constructor(
    private readonly db: Database,
    readonly location: string,
  ) {}

  /** Opens (creating and upgrading) the database; `readonly` opens an existing one as it is, for audits. */
  static open(path: string, o: { readonly?: boolean } = {}): SqliteNotaryStore {
    if (o.readonly) return SqliteNotaryStore.openReadonly(path);
    if (!existsSync(dirname(path)))
      throw new SvcError(
        "usage",
        `notary.database.path: the directory ${dirname(path)} of ${path} does not exist; create it first`,
      );
    let db: Database;
    let version: number;
    try {
      db = new Database(path, { create: true, strict: true });
      db.run("PRAGMA busy_timeout = 5000");
      version = schemaVersion(db); // a file that is no database fails here, unchanged
    } catch (e) {
      throw new SvcError(
        "usage",
        `notary.database.path: cannot open ${path} as a database: ${(e as Error).message}`,
      );
    }
    if (foreignFile(db, version))
      throw new SvcError(
        "usage",
        `notary.database.path: ${path} is a database of another program (tables, but no notary schema); it is left as it is`,
      );
    const newer = newerSchema(version, MIGRATIONS);
    if (newer)
      throw new SvcError("usage", `notary.database.path: ${path} has ${newer}; use a newer svc-proxy`);
    // From here on the file is the notary's to write (WAL is kept in the file).
    db.run("PRAGMA journal_mode = WAL");
    db.run("PRAGMA synchronous = NORMAL");
    db.run("PRAGMA foreign_keys = ON");
    migrate(db, MIGRATIONS, version);
    return new SqliteNotaryStore(db, path);
  }

  private static openReadonly(path: string): SqliteNotaryStore {
    let db: Database;
    try {
      db = new Database(path, { readonly: true, strict: true });
    } catch (e) {
      throw new SvcError("usage", `${path}: cannot open it as a notary database: ${(e as Error).message}`);
    }
    const version = schemaVersion(db);
    if (version !== MIGRATIONS.length) {
      db.close();
      throw new SvcError(
        "usage",
        `${path}: schema version ${version}, this build reads ${MIGRATIONS.length}${version < MIGRATIONS.length ? " (start svc-proxy on it once to upgrade it)" : " (use a newer svc)"}`,
      );
    }
    return new SqliteNotaryStore(db, path);
  }

  /** The schema version this build writes. */
  static readonly VERSION = MIGRATIONS.length;

  async putCertificate(id: string, der: Uint8Array, spiffeId: string, notAfter: Date): Promise<void> {
    this.db.transaction(() => {
      const r = this.db
        .query(
          "INSERT OR IGNORE INTO certificates (id, der, spiffe_id, not_after, created_at) VALUES (?, ?, ?, ?, ?)",
        )
        .run(id, der, spiffeId, Math.floor(notAfter.getTime() / 1000), Date.now());
      if (r.changes === 1)
        appendLeaf(this.db, "certificate", id, recordLeaf("certificate", id, { der }) as Uint8Array);
    })();
  }

  async putStatement(id: string, jws: string, subject: string, certificateId: string): Promise<void> {
    this.db.transaction(() => {
      const r = this.db
        .query(
          "INSERT OR IGNORE INTO statements (id, jws, subject, certificate_id, created_at) VALUES (?, ?, ?, ?, ?)",
        )
        .run(id, jws, subject, certificateId, Date.now());
      if (r.changes === 1)
        appendLeaf(this.db, "statement", id, recordLeaf("statement", id, { jws }) as Uint8Array);
    })();
  }

  async logExchange(x: Exchange, receipt?: StoredReceipt): Promise<number> {
    return this.db.transaction(() => {
      const row = this.db
        .query(
          `INSERT INTO exchanges (request_id, statement_id, level, method, path, request_headers, request_body,
             status, response_headers, response_body, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
           RETURNING id`,
        )
        .get(
          x.requestId,
          x.statementId,
          x.level,
          x.method,
          x.path,
          JSON.stringify(x.requestHeaders),
          x.requestBody,
          x.status,
          JSON.stringify(x.responseHeaders),
          x.responseBody,
          Date.now(),
        ) as { id: number };
      appendLeaf(
        this.db,
        "exchange",
        String(row.id),
        recordLeaf("exchange", String(row.id), { exchange: x }) as Uint8Array,
      );
      if (receipt) {
        this.db
          .query(
            "INSERT INTO receipts (id, jws, statement_id, exchange_id, created_at) VALUES (?, ?, ?, ?, ?)",
          )
          .run(receipt.id, receipt.jws, x.statementId, row.id, Date.now());
        appendLeaf(
          this.db,
          "receipt",
          receipt.id,
          recordLeaf("receipt", receipt.id, { jws: receipt.jws }) as Uint8Array,
        );
        if (receipt.streamId)
          this.db
            .query("INSERT INTO receipt_streams (stream_id, receipt_id) VALUES (?, ?)")
            .run(receipt.streamId, receipt.id);
      }
      return row.id;
    })();
  }

  async statement(
    id: string,
  ): Promise<(StoredObject & { subject: string; certificateId: string }) | undefined> {
    const r = this.db
      .query("SELECT id, jws, subject, certificate_id, created_at FROM statements WHERE id = ?")
      .get(id) as Row | null;
    return r ? statementFromRow(r) : undefined;
  }

  async certificate(
    id: string,
  ): Promise<{ id: string; der: Uint8Array; spiffeId: string; notAfter: Date } | undefined> {
    const r = this.db
      .query("SELECT id, der, spiffe_id, not_after FROM certificates WHERE id = ?")
      .get(id) as Row | null;
    return r ? certificateFromRow(r) : undefined;
  }

  async receipt(
    id: string,
  ): Promise<(StoredObject & { statementId: string; exchange: Exchange }) | undefined> {
    const r = this.db
      .query(
        `SELECT r.id AS receipt_id, r.jws, r.created_at AS receipt_created_at, x.*
         FROM receipts r JOIN exchanges x ON x.id = r.exchange_id WHERE r.id = ?`,
      )
      .get(id) as Row | null;
    return r ? receiptFromRow(r) : undefined;
  }

  async streamReceipt(streamId: string): Promise<string | undefined> {
    const r = this.db.query("SELECT receipt_id FROM receipt_streams WHERE stream_id = ?").get(streamId) as {
      receipt_id: string;
    } | null;
    return r?.receipt_id;
  }

  async exchanges(requestId: string): Promise<Exchange[]> {
    const rows = this.db
      .query("SELECT * FROM exchanges WHERE request_id = ? ORDER BY id")
      .all(requestId) as Row[];
    return rows.map(exchangeFromRow);
  }

  async head(): Promise<{ size: number; root: Hash }> {
    const h = this.db.query("SELECT size, frontier FROM log_head WHERE id = 1").get() as {
      size: number;
      frontier: Uint8Array;
    };
    return { size: h.size, root: rootOf(headFrontier(h.size, h.frontier)) };
  }

  async leafIndex(kind: LeafKind, ref: string): Promise<number | undefined> {
    const r = this.db.query("SELECT idx FROM log_leaves WHERE kind = ? AND ref = ?").get(kind, ref) as {
      idx: number;
    } | null;
    return r?.idx;
  }

  async node(level: number, index: number): Promise<Hash> {
    const r = (
      level === 0
        ? this.db.query("SELECT hash FROM log_leaves WHERE idx = ?").get(index)
        : this.db.query("SELECT hash FROM log_nodes WHERE level = ? AND idx = ?").get(level, index)
    ) as { hash: Uint8Array } | null;
    if (!r) throw new SvcError("notary", `the notary log has no node ${level}/${index}`);
    return r.hash;
  }

  async latestTreeHead(): Promise<TreeHeadRow | undefined> {
    return (this.db.query("SELECT size, root, jws FROM tree_heads ORDER BY size DESC LIMIT 1").get() ??
      undefined) as TreeHeadRow | undefined;
  }

  async treeHead(size: number): Promise<TreeHeadRow | undefined> {
    return (this.db.query("SELECT size, root, jws FROM tree_heads WHERE size = ?").get(size) ?? undefined) as
      | TreeHeadRow
      | undefined;
  }

  async putTreeHead(h: TreeHeadRow): Promise<void> {
    this.db
      .query("INSERT OR IGNORE INTO tree_heads (size, root, jws, created_at) VALUES (?, ?, ?, ?)")
      .run(h.size, h.root, h.jws, Date.now());
  }

  async leaves(from: number, limit: number): Promise<LoggedRecord[]> {
    const rows = this.db
      .query("SELECT idx, kind, ref, hash FROM log_leaves WHERE idx >= ? ORDER BY idx LIMIT ?")
      .all(from, limit) as { idx: number; kind: LeafKind; ref: string; hash: Uint8Array }[];
    return rows.map((r) => ({
      index: r.idx,
      kind: r.kind,
      ref: r.ref,
      hash: r.hash,
      data: recordData(this.db, r.kind, r.ref),
    }));
  }

  async putCosignature(size: number, witness: string, jws: string): Promise<void> {
    this.db
      .query(
        `INSERT INTO cosignatures (size, witness, jws, created_at) VALUES (?, ?, ?, ?)
         ON CONFLICT (size, witness) DO UPDATE SET jws = excluded.jws, created_at = excluded.created_at`,
      )
      .run(size, witness, jws, Date.now());
    this.db
      .query(
        `DELETE FROM cosignatures WHERE witness = ? AND size NOT IN
           (SELECT size FROM cosignatures WHERE witness = ? ORDER BY created_at DESC, size DESC LIMIT ${KEPT_COSIGNATURES})`,
      )
      .run(witness, witness);
  }

  async cosignedHead(
    index: number,
    need: Witnessed,
  ): Promise<{ head: TreeHeadRow; cosignatures: string[] } | undefined> {
    // From the cosignatures (a few per witness), not the tree heads (one per push round).
    const by = need.by ? JSON.stringify(need.by) : null;
    const head = this.db
      .query(
        `SELECT t.size, t.root, t.jws FROM tree_heads t WHERE t.size =
           (SELECT size FROM cosignatures WHERE size > ? AND size IN (SELECT size FROM tree_heads)
              AND (? IS NULL OR witness IN (SELECT value FROM json_each(?)))
            GROUP BY size HAVING count(*) >= ? ORDER BY size DESC LIMIT 1)`,
      )
      .get(index, by, by, Math.max(need.count, 1)) as TreeHeadRow | null;
    if (!head) return undefined;
    const rows = this.db
      .query(
        `SELECT jws FROM cosignatures WHERE size = ?
           AND (? IS NULL OR witness IN (SELECT value FROM json_each(?))) ORDER BY witness`,
      )
      .all(head.size, by, by) as { jws: string }[];
    return { head, cosignatures: rows.map((r) => r.jws) };
  }

  async treeHeads(): Promise<TreeHeadRow[]> {
    return this.db.query("SELECT size, root, jws FROM tree_heads ORDER BY size").all() as TreeHeadRow[];
  }

  async unlogged(): Promise<{ kind: LeafKind; ref: string }[]> {
    return this.db
      .query(
        `SELECT 'certificate' AS kind, id AS ref FROM certificates
           WHERE id NOT IN (SELECT ref FROM log_leaves WHERE kind = 'certificate')
         UNION ALL SELECT 'statement', id FROM statements
           WHERE id NOT IN (SELECT ref FROM log_leaves WHERE kind = 'statement')
         UNION ALL SELECT 'exchange', CAST(id AS TEXT) FROM exchanges
           WHERE CAST(id AS TEXT) NOT IN (SELECT ref FROM log_leaves WHERE kind = 'exchange')
         UNION ALL SELECT 'receipt', id FROM receipts
           WHERE id NOT IN (SELECT ref FROM log_leaves WHERE kind = 'receipt')`,
      )
      .all() as { kind: LeafKind; ref: string }[];
  }

  integrityCheck(): string {
    return (this.db.query("PRAGMA integrity_check").get() as { integrity_check: string }).integrity_check;
  }

  async close(): Promise<void> {
    this.db.close();
  }
}

type Row = Record<string, string | number | Uint8Array>;
