import { Database } from "bun:sqlite";
import { existsSync } from "node:fs";
import { dirname } from "node:path";
import { SvcError } from "../../lib/errors.ts";

/**
 * The notary database (bun:sqlite, WAL): workload statements, the certificates upstreams presented,
 * request logs and receipts. WAL with synchronous=NORMAL never corrupts on a killed process; a committed
 * transaction survives it. Schema changes are numbered migrations recorded in PRAGMA user_version.
 */
const MIGRATIONS: string[] = [
  `CREATE TABLE certificates (
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
     created_at INTEGER NOT NULL);`,
];

export interface Exchange {
  requestId: string;
  statementId: string;
  level: string;
  method: string;
  path: string;
  requestHeaders: Record<string, string>;
  requestBody: Uint8Array;
  status: number;
  responseHeaders: Record<string, string>;
  responseBody: Uint8Array;
}

export interface StoredObject {
  id: string;
  jws: string;
  createdAt: Date;
}

export class NotaryStore {
  private constructor(private readonly db: Database) {}

  static open(path: string): NotaryStore {
    if (!existsSync(dirname(path)))
      throw new SvcError(
        "usage",
        `notary.database.path: the directory ${dirname(path)} of ${path} does not exist; create it first`,
      );
    let db: Database;
    try {
      db = new Database(path, { create: true, strict: true });
      db.run("PRAGMA journal_mode = WAL");
      db.run("PRAGMA synchronous = NORMAL");
      db.run("PRAGMA busy_timeout = 5000");
      db.run("PRAGMA foreign_keys = ON");
    } catch (e) {
      throw new SvcError(
        "usage",
        `notary.database.path: cannot open ${path} as a database: ${(e as Error).message}`,
      );
    }
    const store = new NotaryStore(db);
    store.migrate(path);
    return store;
  }

  /** The schema version this build writes. */
  static readonly VERSION = MIGRATIONS.length;

  private migrate(path: string): void {
    const version = (this.db.query("PRAGMA user_version").get() as { user_version: number }).user_version;
    if (version > MIGRATIONS.length)
      throw new SvcError(
        "usage",
        `notary.database.path: ${path} has schema version ${version}, newer than this build's ${MIGRATIONS.length}; use a newer svc-proxy`,
      );
    for (let v = version; v < MIGRATIONS.length; v++) {
      this.db.transaction(() => {
        this.db.run(MIGRATIONS[v] as string);
        this.db.run(`PRAGMA user_version = ${v + 1}`);
      })();
    }
  }

  putCertificate(id: string, der: Uint8Array, spiffeId: string, notAfter: Date): void {
    this.db
      .query(
        "INSERT OR IGNORE INTO certificates (id, der, spiffe_id, not_after, created_at) VALUES (?, ?, ?, ?, ?)",
      )
      .run(id, der, spiffeId, Math.floor(notAfter.getTime() / 1000), Date.now());
  }

  putStatement(id: string, jws: string, subject: string, certificateId: string): void {
    this.db
      .query(
        "INSERT OR IGNORE INTO statements (id, jws, subject, certificate_id, created_at) VALUES (?, ?, ?, ?, ?)",
      )
      .run(id, jws, subject, certificateId, Date.now());
  }

  /** Records an exchange and, when given, its receipt, in one transaction. Returns the exchange's row id. */
  logExchange(x: Exchange, receipt?: { id: string; jws: string }): number {
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
      if (receipt)
        this.db
          .query(
            "INSERT INTO receipts (id, jws, statement_id, exchange_id, created_at) VALUES (?, ?, ?, ?, ?)",
          )
          .run(receipt.id, receipt.jws, x.statementId, row.id, Date.now());
      return row.id;
    })();
  }

  statement(id: string): (StoredObject & { subject: string; certificateId: string }) | undefined {
    const r = this.db
      .query("SELECT id, jws, subject, certificate_id, created_at FROM statements WHERE id = ?")
      .get(id) as {
      id: string;
      jws: string;
      subject: string;
      certificate_id: string;
      created_at: number;
    } | null;
    return r
      ? {
          id: r.id,
          jws: r.jws,
          subject: r.subject,
          certificateId: r.certificate_id,
          createdAt: new Date(r.created_at),
        }
      : undefined;
  }

  certificate(id: string): { id: string; der: Uint8Array; spiffeId: string; notAfter: Date } | undefined {
    const r = this.db
      .query("SELECT id, der, spiffe_id, not_after FROM certificates WHERE id = ?")
      .get(id) as {
      id: string;
      der: Uint8Array;
      spiffe_id: string;
      not_after: number;
    } | null;
    return r
      ? { id: r.id, der: r.der, spiffeId: r.spiffe_id, notAfter: new Date(r.not_after * 1000) }
      : undefined;
  }

  receipt(id: string): (StoredObject & { statementId: string; exchange: Exchange }) | undefined {
    const r = this.db
      .query(
        `SELECT r.id AS receipt_id, r.jws, r.created_at AS receipt_created_at, x.*
         FROM receipts r JOIN exchanges x ON x.id = r.exchange_id WHERE r.id = ?`,
      )
      .get(id) as Row | null;
    if (!r) return undefined;
    return {
      id: r.receipt_id as string,
      jws: r.jws as string,
      statementId: r.statement_id as string,
      createdAt: new Date(r.receipt_created_at as number),
      exchange: toExchange(r),
    };
  }

  /** Exchanges logged under an X-Request-Id (logRequest and signRequest), oldest first. */
  exchanges(requestId: string): Exchange[] {
    const rows = this.db
      .query("SELECT * FROM exchanges WHERE request_id = ? ORDER BY id")
      .all(requestId) as Row[];
    return rows.map(toExchange);
  }

  integrityCheck(): string {
    return (this.db.query("PRAGMA integrity_check").get() as { integrity_check: string }).integrity_check;
  }

  close(): void {
    this.db.close();
  }
}

type Row = Record<string, string | number | Uint8Array>;

function toExchange(r: Row): Exchange {
  return {
    requestId: r.request_id as string,
    statementId: r.statement_id as string,
    level: r.level as string,
    method: r.method as string,
    path: r.path as string,
    requestHeaders: JSON.parse(r.request_headers as string),
    requestBody: r.request_body as Uint8Array,
    status: r.status as number,
    responseHeaders: JSON.parse(r.response_headers as string),
    responseBody: r.response_body as Uint8Array,
  };
}
