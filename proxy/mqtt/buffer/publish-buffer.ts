import { isUtf8 } from "node:buffer";
import type { Socket } from "node:net";
import type { IConnectPacket, IPublishPacket, Packet } from "mqtt-packet";
import type { BufferOptions } from "../../config/types.ts";
import type { Logger } from "../../log.ts";
import type { Dialer } from "../../stream/dial.ts";
import { encode, type MqttVersion, PacketBatch, Reason, userProperty } from "../codec.ts";
import { MalformedPacket } from "../framer.ts";
import { PROPERTY } from "../notarize.ts";
import { type PublishLayout, publishLayout } from "../publish-layout.ts";
import { PacketReader } from "../reader.ts";
import { type Credentials, presented, sameCredentials } from "./credentials.ts";
import { Delivery } from "./delivery.ts";
import type { BufferEvents } from "./events.ts";
import { MessageQueue, type Offer, type QueuedMessage } from "./queue.ts";
import type { BufferStore, StoredSession } from "./store.ts";

/**
 * The MQTT publish buffer (docs/proxy-mqtt.md, "The publish buffer"): client connections are answered
 * here — a local CONNACK that does not confirm broker acceptance, a PUBACK once a QoS 1 message is queued
 * — and each session (client identifier) has its own in-memory queue, delivered to the target by its own
 * upstream connection. Only publishing: SUBSCRIBE, QoS 2 and notarization are refused with MQTT's reason
 * codes. A client that reconnects with the same identifier takes its session over, queue included; a
 * session ends when no client is connected and its queue is empty. What outlives the process is the
 * store's affair (store.ts): with a file, the sessions and messages it holds are delivered again at start,
 * before any client connects.
 */
export interface PublishBufferDeps {
  options: BufferOptions;
  dial: Dialer;
  events: BufferEvents;
  log: Logger;
  store: BufferStore;
}

interface Session {
  id: string;
  queue: MessageQueue;
  delivery: Delivery;
  client: Socket | undefined;
  /**
   * Ends the attached client's connection for a takeover: nothing it sends from then on is taken or
   * answered, and an MQTT 5 client is told why (DISCONNECT 0x8E).
   */
  takenOver: (() => void) | undefined;
  /** Those of the client attached last: what it publishes goes to the target under them. */
  creds: Credentials;
  /**
   * Those of messages read back from the store, which keeps no password: the first returning client with
   * their user name gives it to them.
   */
  unfilled: Credentials[];
  /** Read back from the store and not yet attached to: the store holds its session already. */
  restored: boolean;
  /** What the store keeps of its upstream CONNECT. */
  stored: StoredSession;
}

const ONLY_PUBLISHING = "svc-proxy's MQTT publish buffer carries publishing connections only";
/** How long a connection the proxy has ended waits for the client to close its side before it is dropped. */
const LINGER_MS = 2000;
const SLACK_BYTES = 64 * 1024;

export class PublishBuffer {
  private readonly sessions = new Map<string, Session>();

  /** Takes over what the store held at start and starts delivering it. */
  constructor(private readonly d: PublishBufferDeps) {
    const { sessions, messages } = d.store.restored();
    if (messages.length === 0) {
      for (const s of sessions) d.store.endSession(s.clientId);
      return;
    }
    const known = new Map(sessions.map((s) => [s.clientId, s]));
    for (const m of messages) {
      let s = this.sessions.get(m.clientId);
      if (!s) {
        const stored = known.get(m.clientId) ?? {
          clientId: m.clientId,
          version: m.version,
          protocolId: m.version === 3 ? "MQIsdp" : "MQTT",
          clean: true,
          keepalive: 60,
        };
        known.delete(m.clientId);
        s = this.create(stored, { username: m.username }, true);
        s.unfilled.push(s.creds);
      } else if (s.creds.username !== m.username) {
        // A run of messages under one user name shares its credentials.
        s.creds = { username: m.username };
        s.unfilled.push(s.creds);
      }
      s.queue.restore({
        ...publishFields(m.publish, m.packet, m.version, publishLayout(m.packet), s.creds),
        seq: m.seq,
        enqueuedAt: m.enqueuedAt,
        sent: true,
        kept: true,
      });
    }
    for (const s of known.values()) d.store.endSession(s.clientId);
    d.events.replayed(messages.length);
    d.log.info("replaying stored messages", { messages: messages.length, sessions: this.sessions.size });
    for (const s of this.sessions.values()) s.delivery.wake();
  }

  /** Stops delivering; what the store holds stays there (in memory, it goes with the process). */
  close(): void {
    for (const s of this.sessions.values()) {
      s.delivery.close();
      s.client?.destroy();
    }
    this.sessions.clear();
    this.d.store.close();
  }

  accept(socket: Socket, log: Logger): void {
    const o = this.d.options;
    let session: Session | undefined;
    let version: MqttVersion | undefined;
    /** Publishes of this connection whose answer waits for an earlier one's (the store's turn). */
    const answers: { ready: boolean; run: () => void }[] = [];
    let keepalive: ReturnType<typeof setTimeout> | undefined;
    let keepaliveMs = 0;
    // What one turn of the event loop answers goes out as one write (PUBACKs for a burst of publishes).
    const out = new PacketBatch();
    const flush = () => {
      if (out.empty) return;
      try {
        const b = out.take();
        if (!socket.destroyed) socket.write(b);
      } catch (e) {
        // Run from a microtask too: a fault of ours ends this connection, never the process.
        log.error("answering the client failed", { error: e as Error });
        socket.destroy();
      }
    };
    // Once the connection is being closed, nothing more is read from it or answered on it.
    let closing = false;
    const send = (p: Packet) => {
      if (closing) return;
      const first = out.empty;
      out.add(p, version ?? 4);
      if (first) queueMicrotask(flush);
    };
    // Ending our side leaves the socket half-open until the client closes its own: give it a while.
    const linger = () => setTimeout(() => socket.destroy(), LINGER_MS).unref();
    const finish = () => {
      flush();
      closing = true;
      socket.end(linger);
    };
    const close = (reason: string, code?: number) => {
      if (socket.destroyed || closing) return;
      flush();
      closing = true;
      log.warn("client connection closed", { reason });
      if (version === 5 && code !== undefined)
        socket.end(
          encode({ cmd: "disconnect", reasonCode: code, properties: { reasonString: reason } }, 5),
          linger,
        );
      else socket.destroy();
    };

    const onConnect = (p: IConnectPacket) => {
      version = p.protocolVersion ?? 4;
      let id = p.clientId;
      let assigned: string | undefined;
      if (!id) {
        if (version !== 5 && !p.clean) {
          send({ cmd: "connack", returnCode: 2, sessionPresent: false });
          finish();
          return;
        }
        id = assigned = `svc-${crypto.randomUUID()}`;
      }
      if (p.password !== undefined && p.username === undefined) {
        // MQTT 5 allows it, but the CONNECT could not be passed on to the target.
        const why = "a password without a user name cannot be passed on by the publish buffer";
        log.warn("CONNECT refused", { reason: why });
        send(
          version === 5
            ? { cmd: "connack", reasonCode: 0x86, sessionPresent: false, properties: { reasonString: why } }
            : { cmd: "connack", returnCode: 4, sessionPresent: false },
        );
        finish();
        return;
      }
      session = this.attach(id, p, version, socket);
      session.takenOver = () => {
        flush();
        closing = true;
        if (version === 5) socket.end(encode({ cmd: "disconnect", reasonCode: 0x8e }, 5), linger);
        else socket.destroy();
      };
      keepaliveMs = (p.keepalive ?? 0) * 1500;
      const notes =
        userProperty(p.properties, PROPERTY.level) !== undefined
          ? { userProperties: { [PROPERTY.error]: "buffered MQTT does not support notarization" } }
          : {};
      send({
        cmd: "connack",
        sessionPresent: false,
        ...(version === 5
          ? {
              reasonCode: 0,
              properties: {
                maximumQoS: 1,
                wildcardSubscriptionAvailable: false,
                subscriptionIdentifiersAvailable: false,
                sharedSubscriptionAvailable: false,
                ...(assigned ? { assignedClientIdentifier: assigned } : {}),
                ...notes,
              },
            }
          : { returnCode: 0 }),
      });
      log.debug("session", { client_id: id, version, held: session.queue.messages });
    };

    const onPublish = (p: IPublishPacket, raw: Buffer, s: Session) => {
      if (p.qos === 2) {
        close("QoS 2 is not supported by the publish buffer (use QoS 0 or 1)", Reason.qosNotSupported);
        return;
      }
      // mqtt-packet reads a QoS 1 PUBLISH without room for its packet identifier as identifier -1.
      const id = p.messageId ?? -1;
      if (p.qos === 1 && !(id >= 1 && id <= 65_535)) {
        close("malformed PUBLISH: QoS 1 without a packet identifier from 1 to 65535", Reason.malformed);
        return;
      }
      // A message the target would refuse must not be acknowledged: held, it would block its session.
      const layout = publishLayout(raw);
      const bad = badTopic(p, raw, layout);
      if (bad) {
        close(`PUBLISH refused: ${bad.why}`, bad.code);
        return;
      }
      const v = version ?? 4;
      const m = publishFields(p, raw, v, layout, s.creds);
      // Answers go out in the order of the publishes (MQTT's rule for PUBACK), each once it is decided.
      const slot = { ready: false, run: () => {} };
      answers.push(slot);
      const decided = (run: () => void) => {
        slot.run = run;
        slot.ready = true;
        while (answers[0]?.ready) {
          const next = answers.shift() as typeof slot;
          try {
            next.run();
          } catch (e) {
            // One answer that fails ends only itself; the ones after it still go out.
            log.error("answering a publish failed", { error: e as Error });
          }
        }
      };
      const result = s.queue.offer(m, { packet: raw, version: v }, (error) =>
        decided(() => {
          // Kept: it is delivered whether or not its publisher is still there to be answered.
          if (!error) s.delivery.wake();
          if (!closing && !socket.destroyed) {
            this.answer(error === undefined ? "queued" : { unstored: error }, p, s, v, send, close);
          }
          if (error && !s.client && s.queue.messages === 0) this.end(s);
        }),
      );
      if (result !== "queued") decided(() => this.answer(result, p, s, v, send, close));
    };

    // The keep-alive runs from the CONNECT on, and every packet pushes it back (one timer, refreshed).
    const alive = () => {
      if (keepaliveMs === 0) return;
      if (keepalive) keepalive.refresh();
      else keepalive = setTimeout(() => close("keep alive expired", 0x8d), keepaliveMs);
    };
    const connectDeadline = setTimeout(
      () => close(`no CONNECT within timeouts.read (${o.connectMs} ms)`),
      o.connectMs,
    );
    const onPacket = (p: Packet, raw: Buffer) => {
      if (closing) return; // the rest of a chunk after DISCONNECT or a refusal
      if (!session) {
        if (p.cmd !== "connect") throw new MalformedPacket("the first packet must be CONNECT");
        clearTimeout(connectDeadline);
        onConnect(p);
        alive();
        return;
      }
      alive();
      switch (p.cmd) {
        case "publish":
          return onPublish(p, raw, session);
        case "pingreq":
          return void send({ cmd: "pingresp" });
        case "disconnect":
          return finish();
        case "subscribe":
          log.warn("SUBSCRIBE refused", { reason: ONLY_PUBLISHING });
          return void send({
            cmd: "suback",
            messageId: p.messageId ?? 0,
            granted: p.subscriptions.map(() =>
              version === 5 ? Reason.implementationSpecific : Reason.subackFailure311,
            ),
            ...(version === 5 ? { properties: { reasonString: ONLY_PUBLISHING } } : {}),
          });
        case "unsubscribe":
          return void send({
            cmd: "unsuback",
            messageId: p.messageId ?? 0,
            granted: version === 5 ? p.unsubscriptions.map(() => 0x11) : [],
          } as Packet);
        default:
          close(`unexpected ${p.cmd.toUpperCase()} packet from a publishing client`, Reason.protocolError);
      }
    };

    const reader = new PacketReader(o.maxBytes + SLACK_BYTES, onPacket);
    socket.on("data", (chunk: Buffer) => {
      if (closing) return;
      try {
        reader.push(chunk);
      } catch (e) {
        if (e instanceof MalformedPacket)
          close(`malformed MQTT packet from the caller: ${e.message}`, Reason.malformed);
        else {
          // A fault of ours on one connection ends that connection, never the process.
          log.error("client connection failed", { error: e as Error });
          close(`internal error: ${(e as Error).message}`, Reason.unspecified);
        }
      }
    });
    socket.on("error", () => {});
    // A client that closes its side without DISCONNECT is done all the same (the listener keeps sockets half-open).
    socket.on("end", finish);
    socket.once("close", () => {
      clearTimeout(keepalive);
      clearTimeout(connectDeadline);
      if (session?.client === socket) {
        session.client = undefined;
        if (session.queue.messages === 0) this.end(session);
      }
    });
    socket.resume();
  }

  /**
   * Answers a PUBLISH by what the queue made of it (docs/proxy-mqtt.md, "Limits and overflow"); one the
   * store could not keep is refused as overflow-policy reject refuses (docs/proxy-mqtt.md, "Storage").
   */
  private answer(
    result: Offer | { unstored: string },
    p: IPublishPacket,
    s: Session,
    version: MqttVersion,
    send: (p: Packet) => void,
    close: (reason: string, code?: number) => void,
  ): void {
    // A failing PUBACK exists only in MQTT 5; a 3.1.1 client learns of a failure by the connection closing.
    const puback = (reasonCode?: number, reasonString?: string) => {
      if (p.qos !== 1 || (reasonCode && version !== 5)) return;
      send({
        cmd: "puback",
        messageId: p.messageId ?? 0,
        ...(reasonCode ? { reasonCode, properties: { reasonString } } : {}),
      });
    };
    if (result === "queued") {
      puback();
      s.delivery.wake();
      return;
    }
    if (result === "dropped") {
      this.d.log.warn("message dropped: buffer full (overflow-policy drop-newest)", {
        client_id: s.id,
        topic: p.topic,
      });
      puback();
      return;
    }
    const why =
      typeof result === "object"
        ? result.unstored
        : result === "rejected"
          ? `publish buffer full (${s.queue.messages} messages, ${s.queue.payloadBytes} payload bytes; overflow-policy reject)`
          : `message of ${p.payload.length} bytes is larger than the buffer's storage.max-bytes (${this.d.options.maxBytes})`;
    if (result === "oversized" && version === 5 && p.qos === 1) {
      // The connection stays: the refusal is logged here (closing it logs the reason otherwise).
      this.d.log.warn("message refused", { client_id: s.id, reason: why });
      puback(Reason.quotaExceeded, why);
      return;
    }
    puback(Reason.quotaExceeded, why);
    close(why, Reason.quotaExceeded);
  }

  /** The session of `id`, created if new; a client already attached to it is disconnected (takeover). */
  private attach(id: string, connect: IConnectPacket, version: MqttVersion, socket: Socket): Session {
    let s = this.sessions.get(id);
    if (s?.client && s.client !== socket) {
      s.takenOver?.();
      s.client = undefined;
    }
    const creds = presented(connect);
    if (s) {
      // What this client publishes goes out under its own credentials. Messages held from an earlier client
      // keep theirs, but for a password the store could not keep: the returning client with their user name
      // gives it.
      if (creds.password !== undefined) {
        const password = creds.password;
        for (const held of s.unfilled) if (held.username === creds.username) held.password = password;
        s.unfilled = s.unfilled.filter((held) => held.username !== creds.username);
      }
      if (!sameCredentials(s.creds, creds)) s.creds = creds;
      const { username: _, ...rest } = s.stored;
      const stored = { ...rest, ...(creds.username !== undefined ? { username: creds.username } : {}) };
      if (s.restored || stored.username !== s.stored.username) this.d.store.openSession(stored);
      s.stored = stored;
      s.restored = false;
    }
    s ??= this.create(
      {
        clientId: id,
        version,
        protocolId: connect.protocolId ?? "MQTT",
        clean: connect.clean ?? true,
        keepalive: connect.keepalive ?? 60,
        ...(connect.username !== undefined ? { username: connect.username } : {}),
      },
      creds,
      false,
    );
    s.client = socket;
    return s;
  }

  /**
   * A new session, with the upstream CONNECT it delivers with (the credentials are each message's); the
   * store keeps the session, with the user name of its client.
   */
  private create(stored: StoredSession, creds: Credentials, restored: boolean): Session {
    const id = stored.clientId;
    const queue = new MessageQueue(id, this.d.options, this.d.events, this.d.store);
    const upstreamConnect: IConnectPacket = {
      cmd: "connect",
      clientId: id,
      protocolVersion: stored.version,
      protocolId: stored.protocolId as IConnectPacket["protocolId"],
      clean: stored.clean,
      keepalive: stored.keepalive,
    };
    const delivery = new Delivery(upstreamConnect, stored.version, queue, {
      ...this.d,
      log: this.d.log.with({ client_id: id }),
    });
    const s: Session = {
      id,
      queue,
      delivery,
      client: undefined,
      takenOver: undefined,
      creds,
      unfilled: [],
      restored,
      stored,
    };
    delivery.onEmpty = () => {
      if (!s.client) this.end(s);
    };
    this.sessions.set(id, s);
    if (!restored) this.d.store.openSession(stored);
    return s;
  }

  private end(s: Session): void {
    if (this.sessions.get(s.id) !== s) return;
    this.sessions.delete(s.id);
    s.delivery.close();
    this.d.store.endSession(s.id);
  }
}

/**
 * A PUBLISH as the queue holds it: the properties passed on, without those of this hop. The packet as
 * received (`raw`, in protocol `version`) is kept to be sent on as it is, unless it carries such a
 * property or has no room for the packet identifier its QoS needs (a file of an older build may hold one).
 */
function publishFields(
  p: IPublishPacket,
  raw: Buffer,
  version: MqttVersion,
  layout: PublishLayout | undefined,
  creds: Credentials,
): Omit<QueuedMessage, "seq" | "enqueuedAt" | "sent" | "kept"> {
  const payload = Buffer.isBuffer(p.payload) ? p.payload : Buffer.from(p.payload);
  const { topicAlias, subscriptionIdentifier, ...properties } = p.properties ?? {};
  return {
    topic: p.topic,
    payload,
    qos: p.qos === 1 ? 1 : 0,
    retain: p.retain,
    creds,
    ...(p.properties ? { properties } : {}),
    ...(layout &&
    (p.qos === 0 || layout.idAt + 2 <= raw.length) &&
    topicAlias === undefined &&
    subscriptionIdentifier === undefined &&
    !replaced(p.properties)
      ? { wire: { packet: raw, version, idAt: layout.idAt } }
      : {}),
  };
}

/**
 * Does a string property hold a replacement character, as mqtt-packet reads bytes that are not UTF-8? Such
 * a PUBLISH is written anew (with the replacement characters, which every broker takes) rather than passed
 * on as received (which a strict broker refuses).
 */
function replaced(props: IPublishPacket["properties"]): boolean {
  if (!props) return false;
  const has = (s: unknown) => typeof s === "string" && s.includes("\uFFFD");
  if (has(props.contentType) || has(props.responseTopic)) return true;
  for (const [k, v] of Object.entries(props.userProperties ?? {}))
    if (has(k) || (Array.isArray(v) ? v.some(has) : has(v))) return true;
  return false;
}

/**
 * Why a PUBLISH cannot be passed on as it is, with its MQTT 5 reason code: a topic alias (the CONNACK
 * allows none, and a stored message must read back alone), a topic name that is not well-formed UTF-8
 * (mqtt-packet would have read it with replacement characters), an empty topic, one with a wildcard, or
 * one with a character MQTT says a topic should not have (controls and noncharacters: strict brokers such
 * as mosquitto refuse them).
 */
function badTopic(
  p: IPublishPacket,
  raw: Buffer,
  layout: PublishLayout | undefined,
): { why: string; code: number } | undefined {
  if (p.properties?.topicAlias !== undefined)
    return {
      why: "topic aliases are not accepted (Topic Alias Maximum is 0)",
      code: Reason.topicAliasInvalid,
    };
  if (!layout || !isUtf8(raw.subarray(layout.topicStart, layout.topicEnd)))
    return { why: "the topic name is not well-formed UTF-8", code: Reason.malformed };
  if (p.topic === "" || p.topic.includes("+") || p.topic.includes("#") || UNWANTED.test(p.topic))
    return {
      why: `topic name ${JSON.stringify(p.topic)} is empty or has a wildcard, a control character or a noncharacter`,
      code: Reason.topicNameInvalid,
    };
  return undefined;
}

/** Control characters (U+0000–U+001F, U+007F–U+009F) and Unicode noncharacters. */
const UNWANTED = /[\p{Cc}\p{Noncharacter_Code_Point}]/u;
