import { Database, type Statement } from "bun:sqlite";
import type { Packet } from "mqtt-packet";
import { SvcError } from "../../../lib/errors.ts";
import { foreignFile, migrate, newerSchema, schemaVersion } from "../../../lib/sqlite-schema.ts";
import type { Logger } from "../../log.ts";
import type { MqttVersion } from "../codec.ts";
import { PacketReader } from "../reader.ts";
import type { BufferEvents } from "./events.ts";
import type { BufferStore, Restored, StoredMessage, StoredSession } from "./store.ts";

/**
 * `storage.type: sqlite` (docs/proxy-mqtt.md, "Storage"): one SQLite file per listener, in WAL mode with
 * synchronous=FULL, so a committed transaction is on disk, not only handed to the kernel. Writes are
 * grouped: everything the buffer asks for within one turn of the event loop is one transaction, and only
 * after it commits are the publishers answered. The file is held with an exclusive lock for the life of
 * the process, so a second svc-proxy configured with it cannot open it. A file this build cannot read
 * (corrupt, not a database, a newer schema) stops the listener and is left as it is.
 */
/** PRAGMA application_id of a buffer file ("svcB"): a database of another program is refused. */
const APPLICATION_ID = 0x73766342;

/** The user name of a message's session: what each message of a schema-1 file takes as its own. */
const SESSION_USERNAME = "(SELECT username FROM sessions WHERE sessions.client_id = messages.client_id)";

const MIGRATIONS = [
  `PRAGMA application_id = ${APPLICATION_ID};
   CREATE TABLE sessions (
     client_id TEXT PRIMARY KEY, version INTEGER NOT NULL, protocol_id TEXT NOT NULL,
     clean INTEGER NOT NULL, keepalive INTEGER NOT NULL, username TEXT);
   CREATE TABLE messages (
     seq INTEGER PRIMARY KEY, client_id TEXT NOT NULL, version INTEGER NOT NULL, packet BLOB NOT NULL,
     payload_bytes INTEGER NOT NULL, enqueued_at INTEGER NOT NULL);`,
  // Each message keeps the user name its publisher presented; those of a file before it had their session's.
  `ALTER TABLE messages ADD COLUMN username TEXT;
   UPDATE messages SET username = ${SESSION_USERNAME};`,
  // Each session keeps the SPIFFE ID of the workload whose clients use it; a session of an older file has
  // none, and the first workload to attach to it takes it.
  "ALTER TABLE sessions ADD COLUMN peer TEXT;",
];

type SessionOp = { open: StoredSession } | { end: string };

interface SessionRow {
  client_id: string;
  version: number;
  protocol_id: string;
  clean: number;
  keepalive: number;
  username: string | null;
  /** Absent before schema 3. */
  peer?: string | null;
}

interface MessageRow {
  seq: number;
  client_id: string;
  version: number;
  packet: Uint8Array;
  payload_bytes: number;
  enqueued_at: number;
  username: string | null;
}

export class SqliteStore implements BufferStore {
  private seq = 0;
  private adds: { m: StoredMessage; done: (error?: string) => void }[] = [];
  private removes: number[] = [];
  private sessionOps: SessionOp[] = [];
  private scheduled = false;
  private closed = false;
  /** Why the last write failed, while writes fail. */
  private failing: string | undefined;
  /** Payload bytes of each stored message, for the stored-bytes gauge. */
  private readonly sizes = new Map<number, number>();
  private readonly insertMessage: Statement;
  private readonly deleteMessage: Statement;
  private readonly upsertSession: Statement;
  private readonly deleteSession: Statement;
  private restoredState: Restored | undefined;

  /**
   * Checks the file and reads back what it holds before anything is written to it (a file that fails is
   * left as it is), then takes it over: WAL, the exclusive lock, the schema upgraded.
   */
  private constructor(
    private readonly db: Database,
    private readonly path: string,
    field: string,
    private readonly events: BufferEvents,
    private readonly log: Logger,
  ) {
    const version = this.check(field);
    // Read (and so checked) before anything is written: an empty file has nothing to read yet.
    let held = version > 0 ? this.read(field, version) : undefined;
    this.takeOver(version);
    held ??= this.read(field, MIGRATIONS.length);
    this.insertMessage = db.prepare(
      "INSERT INTO messages (seq, client_id, version, packet, payload_bytes, enqueued_at, username) VALUES (?, ?, ?, ?, ?, ?, ?)",
    );
    this.deleteMessage = db.prepare("DELETE FROM messages WHERE seq = ?");
    this.upsertSession = db.prepare(
      `INSERT INTO sessions (client_id, version, protocol_id, clean, keepalive, username, peer) VALUES (?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (client_id) DO UPDATE SET version = excluded.version, protocol_id = excluded.protocol_id,
         clean = excluded.clean, keepalive = excluded.keepalive, username = excluded.username, peer = excluded.peer`,
    );
    this.deleteSession = db.prepare("DELETE FROM sessions WHERE client_id = ?");
    this.seq = held.messages.at(-1)?.seq ?? 0;
    let bytes = 0;
    for (const m of held.messages) {
      this.sizes.set(m.seq, m.payloadBytes);
      bytes += m.payloadBytes;
    }
    this.events.stored(held.messages.length, bytes);
    this.restoredState = held;
  }

  /** Opens (creating) the file at `path`; `field` names the setting in errors. */
  static open(path: string, field: string, events: BufferEvents, log: Logger): SqliteStore {
    // That its directory exists and is writable was checked with the configuration (rules.ts).
    let db: Database | undefined;
    try {
      db = new Database(path, { create: true, strict: true });
      db.run("PRAGMA busy_timeout = 0");
      // Exclusive: the lock taken by the first write below is held until the process ends.
      db.run("PRAGMA locking_mode = EXCLUSIVE");
      // A read first: a file held by another process, or that is no database, fails here unchanged.
      db.query("PRAGMA user_version").get();
      return new SqliteStore(db, path, field, events, log);
    } catch (e) {
      // Not closed: closing folds a journal into the file, and the file is to be left as it is. The
      // listener does not start and the process ends, which lets the lock go.
      if (e instanceof SvcError) throw e;
      // Another process holds the lock: at the first read, or when two start at once, at the first write.
      if ((e as { code?: string }).code === "SQLITE_BUSY")
        throw new SvcError(
          "usage",
          `${field}: ${path} is in use by another process (another svc-proxy?); each buffer needs a file of its own`,
        );
      throw new SvcError(
        "usage",
        `${field}: cannot read ${path} as a buffer database: ${(e as Error).message}; the file is left as it is`,
      );
    }
  }

  /** The file's schema version, once it is found readable, intact and a buffer's (or empty). */
  private check(field: string): number {
    const check = this.db.query("PRAGMA quick_check").all() as { quick_check: string }[];
    if (check.length !== 1 || check[0]?.quick_check !== "ok")
      throw new SvcError(
        "usage",
        `${field}: ${this.path} is damaged (${check
          .slice(0, 3)
          .map((r) => r.quick_check)
          .join("; ")}); it is left as it is: move it away to start with an empty buffer`,
      );
    const version = schemaVersion(this.db);
    if (foreignFile(this.db, version, APPLICATION_ID))
      throw new SvcError(
        "usage",
        `${field}: ${this.path} is a database of another program, not an svc-proxy buffer; it is left as it is (give the buffer a file of its own)`,
      );
    if (!Number.isInteger(version) || version < 0)
      throw new SvcError(
        "usage",
        `${field}: ${this.path} has schema version ${version}, which no svc-proxy writes; it is left as it is`,
      );
    const newer = newerSchema(version, MIGRATIONS);
    if (newer)
      throw new SvcError(
        "usage",
        `${field}: ${this.path} has ${newer}; use a newer svc-proxy (the file is left as it is)`,
      );
    return version;
  }

  /** From here on the file is written: WAL with full syncs, held exclusively, its schema brought up to date. */
  private takeOver(version: number): void {
    this.db.run("PRAGMA journal_mode = WAL");
    this.db.run("PRAGMA synchronous = FULL");
    this.db.run("BEGIN EXCLUSIVE");
    this.db.run("COMMIT");
    migrate(this.db, MIGRATIONS, version);
  }

  /** Every session and message the file holds, each checked (a message decoded); throws at the first bad one. */
  private read(field: string, version: number): Restored {
    const bad = (what: string) =>
      new SvcError(
        "usage",
        `${field}: ${this.path} holds ${what}, which this build cannot read; the file is left as it is`,
      );
    const sessions = (this.db.query("SELECT * FROM sessions").all() as SessionRow[]).map(
      (r): StoredSession => {
        if (
          typeof r.client_id !== "string" ||
          !isVersion(r.version) ||
          !["MQTT", "MQIsdp"].includes(r.protocol_id) ||
          ![0, 1].includes(r.clean) ||
          !Number.isInteger(r.keepalive) ||
          r.keepalive < 0 ||
          r.keepalive > 65_535 ||
          (r.username !== null && typeof r.username !== "string") ||
          (r.peer != null && typeof r.peer !== "string")
        )
          throw bad(`a session (${JSON.stringify(r.client_id)})`);
        return {
          clientId: r.client_id,
          version: r.version,
          protocolId: r.protocol_id,
          clean: r.clean === 1,
          keepalive: r.keepalive,
          ...(r.username !== null ? { username: r.username } : {}),
          ...(r.peer != null ? { peer: r.peer } : {}),
        };
      },
    );
    // Schema 1 kept no user name per message: each takes its session's, as the upgrade to 2 writes it.
    const select =
      version === 1
        ? `SELECT *, ${SESSION_USERNAME} AS username FROM messages ORDER BY seq`
        : "SELECT * FROM messages ORDER BY seq";
    const messages = (this.db.query(select).all() as MessageRow[]).map((r) => {
      if (
        !Number.isSafeInteger(r.seq) ||
        r.seq < 1 ||
        typeof r.client_id !== "string" ||
        !isVersion(r.version) ||
        !(r.packet instanceof Uint8Array) ||
        !Number.isSafeInteger(r.enqueued_at) ||
        r.enqueued_at < 0 ||
        (r.username !== null && typeof r.username !== "string")
      )
        throw bad(`a message (seq ${JSON.stringify(r.seq)})`);
      const packet = Buffer.from(r.packet);
      // Each row is one whole packet, decoded on its own: nothing before or after it, nothing of another row.
      const found: { p: Packet; raw: Buffer }[] = [];
      try {
        new PacketReader(packet.length, (p, raw) => found.push({ p, raw }), r.version).push(packet);
      } catch (e) {
        throw bad(`a message (seq ${r.seq}: ${(e as Error).message})`);
      }
      const publish = found[0]?.p;
      if (found.length !== 1 || found[0]?.raw.length !== packet.length)
        throw bad(`a message (seq ${r.seq}) that is not one whole packet`);
      if (publish?.cmd !== "publish" || publish.qos === 2)
        throw bad(`a message (seq ${r.seq}) that is no QoS 0 or 1 PUBLISH`);
      if (r.payload_bytes !== publish.payload.length)
        throw bad(`a message (seq ${r.seq}) whose payload size does not match its packet`);
      return {
        seq: r.seq,
        clientId: r.client_id,
        version: r.version,
        packet,
        payloadBytes: r.payload_bytes,
        enqueuedAt: r.enqueued_at,
        ...(r.username !== null ? { username: r.username } : {}),
        publish,
      };
    });
    return { sessions, messages };
  }

  restored(): Restored {
    const r = this.restoredState ?? { sessions: [], messages: [] };
    this.restoredState = undefined;
    return r;
  }

  nextSeq(): number {
    return ++this.seq;
  }

  openSession(s: StoredSession): void {
    this.sessionOps.push({ open: s });
    this.schedule();
  }

  endSession(clientId: string): void {
    this.sessionOps.push({ end: clientId });
    this.schedule();
  }

  add(m: StoredMessage, done: (error?: string) => void): void {
    this.adds.push({ m, done });
    this.schedule();
  }

  remove(seq: number): void {
    this.removes.push(seq);
    this.schedule();
  }

  /** Writes what is pending and closes the file (its journal folded back into it). */
  close(): void {
    this.flush();
    this.closed = true;
    for (const s of [this.insertMessage, this.deleteMessage, this.upsertSession, this.deleteSession])
      s.finalize();
    this.db.close();
  }

  private schedule(): void {
    if (this.scheduled || this.closed) return;
    this.scheduled = true;
    setImmediate(() => this.flush());
  }

  /** Writes what was asked since the last flush in one transaction, then answers the adds. */
  private flush(): void {
    this.scheduled = false;
    if (this.closed) return; // a turn scheduled before close, whose work close() already wrote
    const { adds, removes, sessionOps } = this;
    if (adds.length + removes.length + sessionOps.length === 0) return;
    this.adds = [];
    this.removes = [];
    this.sessionOps = [];
    try {
      this.db.run("BEGIN");
      try {
        for (const op of sessionOps) {
          if ("end" in op) this.deleteSession.run(op.end);
          else {
            const s = op.open;
            this.upsertSession.run(
              s.clientId,
              s.version,
              s.protocolId,
              s.clean ? 1 : 0,
              s.keepalive,
              s.username ?? null,
              s.peer ?? null,
            );
          }
        }
        for (const { m } of adds)
          this.insertMessage.run(
            m.seq,
            m.clientId,
            m.version,
            m.packet,
            m.payloadBytes,
            m.enqueuedAt,
            m.username ?? null,
          );
        for (const seq of removes) this.deleteMessage.run(seq);
        this.db.run("COMMIT");
      } catch (e) {
        try {
          this.db.run("ROLLBACK");
        } catch {
          // SQLite already rolled back (as it does on a full disk).
        }
        throw e;
      }
    } catch (e) {
      const reason = (e as Error).message;
      // Removals and session changes are tried again with the next write; the new messages are refused.
      this.removes = [...removes, ...this.removes];
      this.sessionOps = [...sessionOps, ...this.sessionOps];
      this.events.storageFailed();
      if (this.failing === undefined)
        this.log.error("buffer storage cannot be written: new publishes are refused until it can", {
          path: this.path,
          error: reason,
        });
      this.failing = reason;
      for (const { done } of adds) this.answer(done, `the buffer's storage cannot be written (${reason})`);
      return;
    }
    if (this.failing !== undefined) {
      this.log.info("buffer storage written again", { path: this.path });
      this.failing = undefined;
    }
    let messages = adds.length;
    let bytes = 0;
    for (const { m } of adds) {
      this.sizes.set(m.seq, m.payloadBytes);
      bytes += m.payloadBytes;
    }
    for (const seq of removes) {
      const size = this.sizes.get(seq);
      if (size === undefined) continue;
      this.sizes.delete(seq);
      messages--;
      bytes -= size;
    }
    this.events.stored(messages, bytes);
    for (const { done } of adds) this.answer(done);
  }

  /** One publisher's answer: a failure there is logged and ends nobody else's. */
  private answer(done: (error?: string) => void, error?: string): void {
    try {
      done(error);
    } catch (e) {
      this.log.error("answering a stored publish failed", { error: e as Error });
    }
  }
}

const isVersion = (v: unknown): v is MqttVersion => v === 3 || v === 4 || v === 5;
