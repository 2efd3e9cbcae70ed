import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { copyFileSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import mqttPacket from "mqtt-packet";
import type { Logger } from "../../proxy/log.ts";
import type { BufferEvents } from "../../proxy/mqtt/buffer/events.ts";
import { SqliteStore } from "../../proxy/mqtt/buffer/messages-sqlite.ts";
import type { StoredMessage } from "../../proxy/mqtt/buffer/store.ts";

/**
 * The buffer's SQLite store on real files (docs/proxy-mqtt.md, "Storage"): what one turn of the event
 * loop asks is one transaction, answered after it; what a later start reads back; sequence numbers.
 */
const dir = mkdtempSync(join(tmpdir(), "svc-store-"));

function open(path: string) {
  const lines: { level: string; msg: string }[] = [];
  const stored = { messages: 0, bytes: 0 };
  const events: BufferEvents = {
    depth() {},
    dropped() {},
    delivered() {},
    connect() {},
    stored: (m, b) => {
      stored.messages += m;
      stored.bytes += b;
    },
    replayed() {},
    storageFailed() {},
  };
  const log = {
    error: (msg: string) => lines.push({ level: "error", msg }),
    warn: (msg: string) => lines.push({ level: "warn", msg }),
    info: (msg: string) => lines.push({ level: "info", msg }),
    debug() {},
  } as unknown as Logger;
  return { store: SqliteStore.open(path, "storage.path", events, log), lines, stored };
}

const publish = (store: SqliteStore, clientId: string, text: string): StoredMessage => ({
  seq: store.nextSeq(),
  clientId,
  version: 4,
  packet: mqttPacket.generate(
    { cmd: "publish", topic: "t", payload: text, qos: 1, messageId: 1, dup: false, retain: false },
    { protocolVersion: 4 },
  ),
  payloadBytes: text.length,
  enqueuedAt: 1,
});

/** Lets the store's write of this turn happen. */
const turn = () => new Promise((r) => setImmediate(r));

describe("MQTT buffer store (SQLite)", () => {
  test("one turn is one write: the adds are answered after it, an add removed in the same turn leaves nothing", async () => {
    const path = join(dir, "turn.db");
    const { store, stored } = open(path);
    store.openSession({ clientId: "c", version: 4, protocolId: "MQTT", clean: true, keepalive: 60 });
    const answered: string[] = [];
    const [a, b] = [publish(store, "c", "a"), publish(store, "c", "bb")];
    store.add(a, (e) => answered.push(e ?? "a kept"));
    store.add(b, (e) => answered.push(e ?? "b kept"));
    store.remove(a.seq);
    expect(answered).toEqual([]);
    await turn();
    expect(answered).toEqual(["a kept", "b kept"]);
    expect(stored).toEqual({ messages: 1, bytes: 2 });
    store.close();

    const again = open(path);
    const held = again.store.restored();
    expect(held.messages.map((m) => [m.seq, m.publish.payload.toString()])).toEqual([[b.seq, "bb"]]);
    expect(held.sessions.map((s) => s.clientId)).toEqual(["c"]);
    expect(again.store.restored().messages).toEqual([]); // handed out once
    // New messages are numbered above every stored one.
    expect(again.store.nextSeq()).toBe(b.seq + 1);
    again.store.close();
  });

  test("close writes what was asked before it and releases the file; after close nothing more is written or logged", async () => {
    const path = join(dir, "closed.db");
    const { store, lines } = open(path);
    const m = publish(store, "c", "x");
    store.add(m, () => {});
    store.close();
    store.remove(m.seq);
    await turn();
    expect(lines.filter((l) => l.level === "error")).toEqual([]);
    // The add before close is on disk, the remove after it is not, and another store may open the file.
    const again = open(path);
    expect(again.store.restored().messages.map((r) => r.seq)).toEqual([m.seq]);
    again.store.close();
  });

  test("a row it cannot read stops the start, naming that row, and the file is left as it is", async () => {
    const good = join(dir, "rows.db");
    const { store } = open(good);
    store.openSession({ clientId: "c", version: 4, protocolId: "MQTT", clean: true, keepalive: 60 });
    const [first, second] = [publish(store, "c", "a"), publish(store, "c", "b")];
    store.add(first, () => {});
    store.add(second, () => {});
    store.close();
    const cases: [string, string, RegExp][] = [
      ["negative schema version", "PRAGMA user_version = -1", /schema version -1, which no svc-proxy writes/],
      ["payload size not a number", "UPDATE messages SET payload_bytes = 'abc' WHERE seq = 1", /seq 1\)/],
      [
        "payload size that does not match",
        "UPDATE messages SET payload_bytes = 5 WHERE seq = 1",
        /seq 1\) whose payload size/,
      ],
      [
        "time of queueing not a number",
        "UPDATE messages SET enqueued_at = 'yesterday' WHERE seq = 1",
        /seq 1\)/,
      ],
      [
        "a stray byte after the packet",
        "UPDATE messages SET packet = packet || x'00' WHERE seq = 1",
        /seq 1\b/,
      ],
      ["a packet cut short", "UPDATE messages SET packet = substr(packet, 1, 4) WHERE seq = 1", /seq 1\b/],
    ];
    for (const [what, sql, says] of cases) {
      const path = join(dir, `rows-${what.replaceAll(" ", "-")}.db`);
      copyFileSync(good, path);
      const db = new Database(path);
      db.run(sql);
      db.close();
      const before = readFileSync(path);
      expect(() => open(path), what).toThrow(says);
      expect(readFileSync(path).equals(before), what).toBe(true);
    }
  });

  test("a file of the first schema is brought up to date: each message takes its session's user name", () => {
    const path = join(dir, "schema-1.db");
    const db = new Database(path, { create: true });
    db.run("PRAGMA application_id = 1937138498");
    db.run(`CREATE TABLE sessions (
      client_id TEXT PRIMARY KEY, version INTEGER NOT NULL, protocol_id TEXT NOT NULL,
      clean INTEGER NOT NULL, keepalive INTEGER NOT NULL, username TEXT)`);
    db.run(`CREATE TABLE messages (
      seq INTEGER PRIMARY KEY, client_id TEXT NOT NULL, version INTEGER NOT NULL, packet BLOB NOT NULL,
      payload_bytes INTEGER NOT NULL, enqueued_at INTEGER NOT NULL)`);
    db.run("PRAGMA user_version = 1");
    db.run("INSERT INTO sessions VALUES ('c', 4, 'MQTT', 1, 60, 'meter'), ('d', 4, 'MQTT', 1, 60, NULL)");
    const packet = mqttPacket.generate(
      { cmd: "publish", topic: "t", payload: "x", qos: 1, messageId: 1, dup: false, retain: false },
      { protocolVersion: 4 },
    );
    const insert = db.prepare("INSERT INTO messages VALUES (?, ?, 4, ?, 1, 1)");
    insert.run(1, "c", packet);
    insert.run(2, "d", packet);
    db.close();
    const refused = join(dir, "schema-1-bad.db");
    copyFileSync(path, refused);
    const bad = new Database(refused);
    bad.run("UPDATE messages SET payload_bytes = 7 WHERE seq = 2");
    bad.close();
    const { store } = open(path);
    expect(store.restored().messages.map((m) => [m.seq, m.username])).toEqual([
      [1, "meter"],
      [2, undefined],
    ]);
    store.close();
    // A file of schema 1 with a row it cannot read is refused before it is brought up to date: unchanged.
    const before = readFileSync(refused);
    expect(() => open(refused)).toThrow(/seq 2\) whose payload size/);
    expect(readFileSync(refused).equals(before)).toBe(true);
  });

  test("a session ended and begun again in one turn is kept", async () => {
    const path = join(dir, "sessions.db");
    const { store } = open(path);
    const s = { clientId: "c", version: 5 as const, protocolId: "MQTT", clean: false, keepalive: 30 };
    store.openSession(s);
    await turn();
    store.endSession("c");
    store.openSession({ ...s, username: "meter" });
    store.close();
    expect(open(path).store.restored().sessions).toEqual([{ ...s, username: "meter" }]);
  });
});
