import { Database } from "bun:sqlite";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type DevApi, startProdApis, tempDir } from "../support/dev-api.ts";
import { type Buffered, buffered } from "../support/mqtt-buffer.ts";
import { collect, mqttClient, rawMqtt } from "../support/mqtt-clients.ts";
import { BUN, ROOT, runToEnd, stopAll } from "../support/proc.ts";
import { logLines, waitForLog } from "../support/proxy.ts";
import { waitUntil } from "../support/wait.ts";

/**
 * What only `storage.type: sqlite` does (docs/proxy-mqtt.md, "Storage"): acknowledged messages outlive
 * the process and are replayed without their publisher; the password of a CONNECT never reaches the file;
 * a file that cannot be read, a directory that cannot be written, a file another proxy holds and a full
 * file system each get a clear answer and lose nothing. Everything the buffer does alike in memory and on
 * disk is tested with both in proxy-mqtt-buffer.test.ts.
 */
const dir = tempDir();
const apis: Record<string, DevApi> = {};
const mounts: string[] = [];

beforeAll(async () => {
  Object.assign(apis, await startProdApis(dir, ["web", "api"]));
});
afterAll(async () => {
  await stopAll();
  for (const m of mounts) await runToEnd(["umount", m]);
}, 30_000);

const fast = { "reconnect-backoff": { initial: "100ms", max: "1s" } };
const sqlite = (path: string, extra: Record<string, unknown> = {}) => ({
  ...fast,
  storage: { type: "sqlite", path, ...extra },
});
const digest = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");

/** Starts svc-proxy with `config`, expecting it to exit at once (killed after 20 s): exit code, stderr. */
async function failsToStart(config: object): Promise<{ code: number; err: string }> {
  const { code, err } = await runToEnd(["timeout", "20", BUN, "cmd/svc-proxy.ts"], {
    cwd: ROOT,
    env: { ...process.env, SVC_PROXY_CONFIG: JSON.stringify(config) },
  });
  return { code, err };
}

/** Publishes `n` QoS 1 messages "<prefix>-i" on topic `t`, each acknowledged before the next. */
async function publish(b: Buffered, clientId: string, t: string, n: number, prefix = clientId) {
  const pub = await mqttClient(b.port, { clientId });
  for (let i = 0; i < n; i++) await pub.publishAsync(t, `${prefix}-${i}`, { qos: 1 });
  await pub.endAsync();
}

/** A tmpfs of `size` at a new directory (the file-system cases need root, as CI has). */
async function tmpfs(size: string): Promise<string> {
  const at = join(dir, `fs-${mounts.length}`);
  mkdirSync(at);
  const r = await runToEnd(["mount", "-t", "tmpfs", "-o", `size=${size}`, "tmpfs", at]);
  if (r.code !== 0) throw new Error(`mount a tmpfs at ${at} (run the tests as root): ${r.err}`);
  mounts.push(at);
  return at;
}

describe("MQTT publish buffer, storage sqlite", () => {
  test("a restart replays every acknowledged message without its publisher; no password reaches the file", async () => {
    const path = join(dir, "replay.db");
    const b = await buffered(dir, apis, sqlite(path), { linkUp: false });
    const v5 = await mqttClient(b.port, {
      clientId: "dev-5",
      username: "meter",
      password: "never-on-disk-5",
    });
    await v5.publishAsync("r/5", "with properties", {
      qos: 1,
      properties: {
        contentType: "text/plain",
        correlationData: Buffer.from([0, 1, 2]),
        userProperties: { site: "north" },
      },
    });
    await v5.publishAsync("r/5", "qos 0", { qos: 0 });
    await v5.endAsync();
    const v4 = await mqttClient(b.port, {
      clientId: "dev-4",
      protocolVersion: 4,
      username: "meter",
      password: "never-on-disk-4",
    });
    for (const m of ["a", "b", "c"]) await v4.publishAsync("r/4", m, { qos: 1 });
    await v4.endAsync();
    await waitUntil(
      "all five stored",
      async () => (await b.metric("svc_proxy_mqtt_buffer_stored_messages")) === 5,
    );
    await b.client.stop("SIGKILL");

    const onDisk = Buffer.concat([
      readFileSync(path),
      existsSync(`${path}-wal`) ? readFileSync(`${path}-wal`) : Buffer.alloc(0),
    ]);
    expect(onDisk.includes("never-on-disk")).toBe(false);
    expect(onDisk.includes("meter")).toBe(true);

    await b.restart();
    expect(await b.metric('svc_proxy_mqtt_buffer_replayed_total{listener="mqtt"}')).toBe(5);
    const sub5 = await mqttClient(b.broker.port, { clientId: "sub-5" });
    const got5: { payload: string; props: unknown }[] = [];
    sub5.on("message", (_t, payload, packet) =>
      got5.push({ payload: payload.toString(), props: packet.properties }),
    );
    await sub5.subscribeAsync("r/5", { qos: 1 });
    const sub4 = await collect(b.broker.port, "r/4");
    await b.linkUp();
    expect(await sub4.until(3)).toEqual(["a", "b", "c"]);
    await waitUntil("both v5 messages", () => got5.length >= 2);
    expect(got5.map((m) => m.payload)).toEqual(["with properties", "qos 0"]);
    expect(got5[0]?.props).toMatchObject({
      contentType: "text/plain",
      correlationData: Buffer.from([0, 1, 2]),
      userProperties: { site: "north" },
    });
    await waitUntil(
      "storage emptied",
      async () => (await b.metric("svc_proxy_mqtt_buffer_stored_messages")) === 0,
    );
    await Promise.all([sub5.endAsync(), sub4.client.endAsync()]);
  }, 60_000);

  test("a replay without the password waits for the publisher's return, then uses its password", async () => {
    const users = { meter: "meter-secret", reader: "reader-secret" };
    const b = await buffered(dir, apis, sqlite(join(dir, "credentials.db")), { linkUp: false, users });
    const pub = await mqttClient(b.port, { clientId: "cred", username: "meter", password: users.meter });
    for (const m of ["1", "2", "3"]) await pub.publishAsync("cred", m, { qos: 1 });
    await pub.endAsync();
    await b.client.stop("SIGKILL");
    await b.restart();
    const sub = await collect(b.broker.port, "cred", { username: "reader", password: users.reader });
    await b.linkUp();
    // The broker refuses the stored session's CONNECT: it has a username and no password.
    await waitUntil("the replay refused", () =>
      logLines(b.client).some(
        (l) => l.msg === "upstream failed" && String(l.reason).includes("refused CONNECT"),
      ),
    );
    expect(sub.messages).toEqual([]);
    const back = await mqttClient(b.port, { clientId: "cred", username: "meter", password: users.meter });
    expect(await sub.until(3)).toEqual(["1", "2", "3"]);
    await Promise.all([back.endAsync(), sub.client.endAsync()]);
  }, 60_000);

  test("after a restart, a client with the user name but no password publishes under its own credentials, never the password the stored messages get later", async () => {
    // Found by an adversarial trial: the new client shared the stored messages' credentials object, and
    // the password meter gave on its return reached the intruder's message too.
    const users = { meter: "meter-secret", reader: "reader-secret" };
    const b = await buffered(dir, apis, sqlite(join(dir, "no-password.db")), { linkUp: false, users });
    const a = await mqttClient(b.port, { clientId: "dev", username: "meter", password: users.meter });
    await a.publishAsync("np", "stored", { qos: 1 });
    await a.endAsync();
    await b.client.stop("SIGKILL");
    await b.restart();
    const intruder = await mqttClient(b.port, { clientId: "dev", username: "meter" });
    await intruder.publishAsync("np", "without a password", { qos: 1 });
    await intruder.endAsync();
    const back = await mqttClient(b.port, { clientId: "dev", username: "meter", password: users.meter });
    await back.publishAsync("np", "after", { qos: 1 });
    await back.endAsync();
    const sub = await collect(b.broker.port, "np", { username: "reader", password: users.reader });
    await b.linkUp();
    await b.emptied();
    expect(await sub.until(2)).toEqual(["stored", "after"]);
    expect(sub.messages).not.toContain("without a password");
    await sub.client.endAsync();
  }, 60_000);

  test("after a restart each stored message keeps its publisher's user name; the returning user's password reaches all of its messages", async () => {
    const users = { meter: "meter-secret", spare: "spare-secret", reader: "reader-secret" };
    const b = await buffered(dir, apis, sqlite(join(dir, "runs.db")), { linkUp: false, users });
    // One session, three runs of user names: meter, spare, meter.
    for (const [username, payload] of [
      ["meter", "m1"],
      ["spare", "s1"],
      ["meter", "m2"],
    ] as const) {
      const c = await mqttClient(b.port, { clientId: "runs", username, password: users[username] });
      await c.publishAsync("runs", payload, { qos: 1 });
      await c.endAsync();
    }
    await b.client.stop("SIGKILL");
    await b.restart();
    // meter returns (its password reaches m1 and m2); spare does not, so s1 has no password.
    const back = await mqttClient(b.port, { clientId: "runs", username: "meter", password: users.meter });
    await back.publishAsync("runs", "m3", { qos: 1 });
    const sub = await collect(b.broker.port, "runs", { username: "reader", password: users.reader });
    await b.linkUp();
    await b.emptied();
    // s1 went out as spare without a password: refused, and dropped since later messages waited.
    expect(await sub.until(3)).toEqual(["m1", "m2", "m3"]);
    expect(
      logLines(b.client).some(
        (l) => String(l.msg).startsWith("messages dropped: the target refused") && l.dropped === 1,
      ),
    ).toBe(true);
    await Promise.all([back.endAsync(), sub.client.endAsync()]);
  }, 60_000);

  test("a CONNECT refused for want of a password that came while it was on its way drops nothing: the next attempt presents it", async () => {
    const users = { meter: "meter-secret", other: "other-secret", reader: "reader-secret" };
    const b = await buffered(
      dir,
      apis,
      { ...sqlite(join(dir, "race.db")), "reconnect-backoff": { initial: "100ms", max: "20s" } },
      { linkUp: false, users },
    );
    const meter = async () =>
      mqttClient(b.port, { clientId: "race", username: "meter", password: users.meter });
    const first = await meter();
    for (const m of ["r1", "r2"]) await first.publishAsync("race", m, { qos: 1 });
    await first.endAsync();
    await b.client.stop("SIGKILL");
    await b.restart();
    const sub = await collect(b.broker.port, "race", { username: "reader", password: users.reader });
    // The broker stopped: the replay's CONNECT, without a password, waits unread in its socket.
    b.broker.signal("SIGSTOP");
    try {
      await b.linkUp();
      await waitUntil("the replay's CONNECT at the broker", () => b.broker.unread() > 0, 30_000);
      // Meanwhile meter returns with its password, and another user publishes after it.
      const back = await meter();
      await back.publishAsync("race", "u-new", { qos: 1 });
      await back.endAsync();
      const other = await mqttClient(b.port, { clientId: "race", username: "other", password: users.other });
      await other.publishAsync("race", "o-1", { qos: 1 });
      await other.endAsync();
    } finally {
      b.broker.signal("SIGCONT");
    }
    await b.emptied();
    expect(await sub.until(4)).toEqual(["r1", "r2", "u-new", "o-1"]);
    const lines = logLines(b.client);
    // The broker did refuse that CONNECT, and nothing was dropped for it.
    expect(
      lines.some((l) => l.msg === "upstream failed" && String(l.reason).includes("refused CONNECT")),
    ).toBe(true);
    expect(lines.some((l) => String(l.msg).startsWith("messages dropped"))).toBe(false);
    await sub.client.endAsync();
  }, 90_000);

  test("a message stored after its publisher left is delivered all the same; a password without a user name, and an authentication method, are refused", async () => {
    const b = await buffered(dir, apis, sqlite(join(dir, "left.db")));
    const sub = await collect(b.broker.port, "left");
    // CONNECT, PUBLISH and DISCONNECT in one write: the connection is gone before the message is on disk.
    await rawMqtt(
      b.port,
      [
        { cmd: "connect", clientId: "left", protocolVersion: 4 },
        { cmd: "publish", topic: "left", payload: "after the publisher", qos: 0, dup: false, retain: false },
        { cmd: "disconnect" },
      ],
      4,
    );
    expect(await sub.until(1)).toEqual(["after the publisher"]);
    // mqtt-packet cannot write this CONNECT either (hence the refusal): MQTT 5, clean start, password "x",
    // client identifier "nameless", no user name, written byte by byte.
    const nameless = Buffer.from("101800044d5154540542003c0000086e616d656c6573730001" + "78", "hex");
    expect(await rawMqtt(b.port, [nameless])).toMatchObject([{ cmd: "connack", reasonCode: 0x86 }]);
    // MQTT 5 enhanced authentication, which the buffer cannot take part in: 0x8C, not a CONNACK of success
    // for a method it dropped.
    const scram = {
      cmd: "connect" as const,
      clientId: "scram",
      protocolVersion: 5 as const,
      properties: { authenticationMethod: "SCRAM-SHA-1" },
    };
    expect(await rawMqtt(b.port, [scram])).toMatchObject([{ cmd: "connack", reasonCode: 0x8c }]);
    // Authentication data without a method is a protocol error (MQTT 5 section 3.1.2.11.10).
    const dataAlone = { ...scram, properties: { authenticationData: Buffer.from("x") } };
    expect(await rawMqtt(b.port, [dataAlone])).toMatchObject([{ cmd: "connack", reasonCode: 0x82 }]);
    await sub.client.endAsync();
  }, 60_000);

  test("files it cannot read stop the listener, naming the file, and are left as they are", async () => {
    const config = (path: string) => ({
      spiffe: { workload_socket_path: apis.web?.socket },
      metricsAddr: "0",
      listeners: [
        {
          name: "mqtt",
          protocol: "mqtt",
          address: "127.0.0.1:0",
          mode: "client",
          target: { url: "mqtts://127.0.0.1:1" },
          middlewares: [{ type: "buffer", storage: { type: "sqlite", path } }],
        },
      ],
    });
    const garbage = join(dir, "garbage.db");
    writeFileSync(garbage, Buffer.alloc(8192, 0x5a));
    const foreign = join(dir, "foreign.db");
    const other = new Database(foreign, { create: true });
    other.run("CREATE TABLE accounts (id INTEGER PRIMARY KEY)");
    other.close();
    const newer = join(dir, "newer.db");
    const db = new Database(newer, { create: true });
    db.run("PRAGMA application_id = 1937138498"); // a buffer's ("svcB"), written by a newer build
    db.run("PRAGMA user_version = 99");
    db.close();
    // A real buffer file with messages, one of its pages overwritten.
    const damaged = join(dir, "damaged.db");
    const b = await buffered(dir, apis, sqlite(damaged), { linkUp: false });
    await publish(b, "dmg", "d", 200, "x".repeat(200));
    await b.client.stop();
    const bytes = readFileSync(damaged);
    expect(bytes.length).toBeGreaterThan(4 * 4096);
    bytes.fill(0xff, 4096, 4 * 4096);
    writeFileSync(damaged, bytes);

    for (const [path, says] of [
      [garbage, "file is not a database"],
      [newer, "schema version 99, newer than this build's 3"],
      [foreign, "a database of another program"],
      [damaged, damaged],
    ] as const) {
      const before = digest(path);
      const { code, err } = await failsToStart(config(path));
      expect(code).not.toBe(0);
      expect(err).toContain(`listener mqtt: storage.path: `);
      expect(err).toContain(path);
      expect(err).toContain(says);
      expect(err).not.toContain("    at ");
      expect(digest(path)).toBe(before);
    }
  }, 60_000);

  test("two proxies cannot share a file, nor two listeners of one proxy", async () => {
    const path = join(dir, "shared.db");
    const b = await buffered(dir, apis, sqlite(path), { linkUp: false });
    // A metrics address of its own: the first proxy holds the configuration's.
    const { code, err } = await failsToStart({ ...b.config, metricsAddr: "0" });
    expect(code).not.toBe(0);
    expect(err).toContain(`${path} is in use by another process`);
    const listener = (b.config as { listeners: object[] }).listeners[0] as Record<string, unknown>;
    const twice = await failsToStart({
      ...b.config,
      listeners: [listener, { ...listener, name: "again", address: "127.0.0.1:0" }],
    });
    expect(twice.code).not.toBe(0);
    expect(twice.err).toContain("listeners[1].middlewares[0].storage.path");
    expect(twice.err).toContain("each buffer needs a file of its own");
    // The first proxy still serves.
    await publish(b, "still", "s", 1);
    expect(await b.metric("svc_proxy_mqtt_buffer_stored_messages")).toBe(1);
  }, 60_000);

  test("a read-only directory stops the listener, naming it; writable again, every message is replayed", async () => {
    const at = await tmpfs("16m");
    const path = join(at, "buffer.db");
    const b = await buffered(dir, apis, sqlite(path), { linkUp: false });
    await publish(b, "ro", "ro", 20);
    await b.client.stop("SIGKILL");
    const before = digest(path);
    expect((await runToEnd(["mount", "-o", "remount,ro", at])).code).toBe(0);
    const { code, err } = await failsToStart(b.config);
    expect(code).not.toBe(0);
    expect(err).toContain(at);
    expect(err).toContain("not writable");
    expect(digest(path)).toBe(before);
    expect((await runToEnd(["mount", "-o", "remount,rw", at])).code).toBe(0);
    await b.restart();
    expect(await b.metric('svc_proxy_mqtt_buffer_replayed_total{listener="mqtt"}')).toBe(20);
    const sub = await collect(b.broker.port, "ro");
    await b.linkUp();
    expect(await sub.until(20)).toEqual(Array.from({ length: 20 }, (_, i) => `ro-${i}`));
    await sub.client.endAsync();
  }, 60_000);

  test("a full file system refuses new publishes like overflow-policy reject; what was stored still flows", async () => {
    const at = await tmpfs("1m");
    const b = await buffered(dir, apis, sqlite(join(at, "buffer.db")), { linkUp: false });
    const pub = await mqttClient(b.port, { clientId: "full" });
    const acked: number[] = [];
    let refusal: (Error & { code?: number }) | undefined;
    for (let i = 0; i < 2000 && !refusal; i++)
      await pub.publishAsync("full", `${i}:${"p".repeat(1000)}`, { qos: 1 }).then(
        () => acked.push(i),
        (e) => {
          refusal = e;
        },
      );
    expect(refusal?.code).toBe(0x97);
    expect(acked.length).toBeGreaterThan(0);
    // The log line was written before the refusal went out; reading the proxy's stderr may lag.
    await waitForLog(b.client, "buffer storage cannot be written: new publishes are refused until it can");
    expect(
      await b.metric('svc_proxy_mqtt_buffer_dropped_total{listener="mqtt",reason="storage"}'),
    ).toBeGreaterThan(0);
    const sub = await collect(b.broker.port, "full");
    await b.linkUp();
    const got = await sub.until(acked.length, 30_000);
    expect(new Set(got.map((m) => Number(m.split(":")[0])))).toEqual(new Set(acked));
    await sub.client.endAsync();
  }, 90_000);
});
