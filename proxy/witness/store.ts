/**
 * What a witness remembers (docs/notary.md, "Witnesses"), in one SQLite file: per log, the largest
 * checkpoint it accepted (and so cosigns) and, once the log was caught cut or forked, why it refuses it;
 * and the evidence of each refusal. WAL with synchronous=FULL: a checkpoint is on disk before it is
 * cosigned, so a witness killed at any moment never cosigns anything it does not remember.
 */
import { Database } from "bun:sqlite";
import { existsSync } from "node:fs";
import { dirname } from "node:path";
import { SvcError } from "../../lib/errors.ts";
import type { Hash } from "../../lib/notary-objects/merkle.ts";
import { foreignFile, migrate, newerSchema, schemaVersion } from "../../lib/sqlite-schema.ts";

/** PRAGMA application_id of a witness file ("svcW"): a database of another program is refused. */
const APPLICATION_ID = 0x73766357;

const MIGRATIONS = [
  `PRAGMA application_id = ${APPLICATION_ID};
   CREATE TABLE logs (
     origin TEXT PRIMARY KEY, size INTEGER NOT NULL, root BLOB NOT NULL, note TEXT NOT NULL,
     tree_head TEXT NOT NULL, updated_at INTEGER NOT NULL, refused TEXT, refused_at INTEGER);
   CREATE TABLE evidence (
     id INTEGER PRIMARY KEY, origin TEXT NOT NULL, received_at INTEGER NOT NULL, reason TEXT NOT NULL,
     held_size INTEGER NOT NULL, held_note TEXT NOT NULL, old_size INTEGER NOT NULL, proof TEXT NOT NULL,
     note TEXT NOT NULL, tree_head TEXT NOT NULL);`,
];

/** The checkpoint a witness holds for a log. */
export interface HeldCheckpoint {
  origin: string;
  size: number;
  root: Hash;
  /** The checkpoint as the log signed it, and the JWS tree head that came with it. */
  note: string;
  treeHead: string;
  updatedAt: Date;
  /** Why the witness refuses this log (cut or forked), until an operator acts. */
  refused?: string;
  refusedAt?: Date;
}

/** A checkpoint the witness refused: what it held, and what it was sent. */
interface Evidence {
  id: number;
  origin: string;
  receivedAt: Date;
  reason: string;
  heldSize: number;
  heldNote: string;
  oldSize: number;
  /** The consistency proof sent, base64 hashes one per line. */
  proof: string;
  note: string;
  treeHead: string;
}

const held = (r: Record<string, unknown>): HeldCheckpoint => ({
  origin: r.origin as string,
  size: Number(r.size),
  root: new Uint8Array(r.root as Uint8Array),
  note: r.note as string,
  treeHead: r.tree_head as string,
  updatedAt: new Date(Number(r.updated_at)),
  ...(r.refused ? { refused: r.refused as string, refusedAt: new Date(Number(r.refused_at)) } : {}),
});

export class WitnessStore {
  private constructor(
    private readonly db: Database,
    readonly path: string,
  ) {}

  /**
   * Opens (creating and upgrading) the witness database; `field` names the setting in errors. `existing`:
   * a file that is not there is an error, not a new database (svc notary witness).
   */
  static open(path: string, field = "witness.database", existing = false): WitnessStore {
    if (existing && !existsSync(path))
      throw new SvcError("usage", `${field} ${path}: no such file (the witness's witness.database)`);
    if (!existsSync(dirname(path)))
      throw new SvcError(
        "usage",
        `${field}: the directory ${dirname(path)} of ${path} does not exist; create it first`,
      );
    let db: Database;
    try {
      db = new Database(path, { create: true, strict: true });
      db.run("PRAGMA busy_timeout = 5000");
      // Checked before anything is written, so that a file refused is left as it is.
      const version = schemaVersion(db);
      if (foreignFile(db, version, APPLICATION_ID)) throw new Error("it is not a witness database");
      const newer = newerSchema(version, MIGRATIONS);
      if (newer) throw new Error(`${newer}; use a newer svc-proxy`);
      db.run("PRAGMA journal_mode = WAL");
      db.run("PRAGMA synchronous = FULL");
      migrate(db, MIGRATIONS, version);
    } catch (e) {
      throw new SvcError(
        "usage",
        `${field}: cannot open ${path} as a witness database: ${(e as Error).message}`,
      );
    }
    return new WitnessStore(db, path);
  }

  held(origin: string): HeldCheckpoint | undefined {
    const r = this.db.query("SELECT * FROM logs WHERE origin = ?").get(origin) as Record<
      string,
      unknown
    > | null;
    return r ? held(r) : undefined;
  }

  logs(): HeldCheckpoint[] {
    return (this.db.query("SELECT * FROM logs ORDER BY origin").all() as Record<string, unknown>[]).map(held);
  }

  /**
   * Runs `decide` on what is held for `origin` now and applies its verdict in one transaction, so that
   * two checkpoints of one log are never both measured against the same held one.
   */
  decide<T>(
    origin: string,
    decide: (now: HeldCheckpoint | undefined) => {
      accept?: Omit<HeldCheckpoint, "updatedAt" | "refused" | "refusedAt">;
      refuse?: Omit<Evidence, "id" | "receivedAt" | "heldSize" | "heldNote">;
      result: T;
    },
  ): T {
    return this.db.transaction(() => {
      const now = this.held(origin);
      const verdict = decide(now);
      const at = Date.now();
      if (verdict.accept) {
        const a = verdict.accept;
        this.db
          .query(
            `INSERT INTO logs (origin, size, root, note, tree_head, updated_at) VALUES (?, ?, ?, ?, ?, ?)
             ON CONFLICT (origin) DO UPDATE SET size = excluded.size, root = excluded.root,
               note = excluded.note, tree_head = excluded.tree_head, updated_at = excluded.updated_at`,
          )
          .run(origin, a.size, a.root, a.note, a.treeHead, at);
      }
      if (verdict.refuse && now) {
        const e = verdict.refuse;
        // The first refusal is kept as evidence; later ones of a refused log are only counted and logged.
        if (!now.refused) {
          this.db
            .query(
              `INSERT INTO evidence (origin, received_at, reason, held_size, held_note, old_size, proof, note, tree_head)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
            )
            .run(origin, at, e.reason, now.size, now.note, e.oldSize, e.proof, e.note, e.treeHead);
          this.db
            .query("UPDATE logs SET refused = ?, refused_at = ? WHERE origin = ?")
            .run(e.reason, at, origin);
        }
      }
      return verdict.result;
    })();
  }

  evidence(): Evidence[] {
    const rows = this.db.query("SELECT * FROM evidence ORDER BY id").all() as Record<string, unknown>[];
    return rows.map((r) => ({
      id: Number(r.id),
      origin: r.origin as string,
      receivedAt: new Date(Number(r.received_at)),
      reason: r.reason as string,
      heldSize: Number(r.held_size),
      heldNote: r.held_note as string,
      oldSize: Number(r.old_size),
      proof: r.proof as string,
      note: r.note as string,
      treeHead: r.tree_head as string,
    }));
  }

  /** The operator's decision: serve the log again, still held to the checkpoint the witness has. */
  resume(origin: string): boolean {
    return (
      this.db.query("UPDATE logs SET refused = NULL, refused_at = NULL WHERE origin = ?").run(origin)
        .changes === 1
    );
  }

  /** The operator's decision: forget the log's checkpoint (its evidence is kept); the next one starts anew. */
  forget(origin: string): boolean {
    return this.db.query("DELETE FROM logs WHERE origin = ?").run(origin).changes === 1;
  }

  close(): void {
    this.db.close();
  }
}
