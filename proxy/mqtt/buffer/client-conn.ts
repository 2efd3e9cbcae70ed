/**
 * One client's connection to the publish buffer (docs/proxy-mqtt.md, "The publish buffer"): its CONNECT
 * answered locally, its PUBLISHes queued in its session and answered in order once kept, SUBSCRIBE and
 * QoS 2 refused with MQTT's reason codes, its keep-alive and CONNECT deadline. A fault on it ends this
 * connection only.
 */
import { isUtf8 } from "node:buffer";
import type { Socket } from "node:net";
import type { IConnectPacket, IPublishPacket, Packet } from "mqtt-packet";
import type { Logger } from "../../log.ts";
import { encode, type MqttVersion, PacketBatch, Reason, userProperty } from "../codec.ts";
import { MalformedPacket } from "../framer.ts";
import { PROPERTY } from "../notarize.ts";
import { type PublishLayout, publishLayout, publishPropertyIds } from "../publish-layout.ts";
import { PacketReader } from "../reader.ts";
import type { PublishBufferDeps } from "./publish-buffer.ts";
import { publishFields } from "./publish-fields.ts";
import type { Offer } from "./queue.ts";
import type { Session, Sessions } from "./session.ts";

const ONLY_PUBLISHING = "svc-proxy's MQTT publish buffer carries publishing connections only";
/** How long a connection the proxy has ended waits for the client to close its side before it is dropped. */
const LINGER_MS = 2000;
const SLACK_BYTES = 64 * 1024;

export class ClientConn {
  private session: Session | undefined;
  private version: MqttVersion | undefined;
  /** Publishes of this connection whose answer waits for an earlier one's (the store's turn). */
  private readonly answers: { ready: boolean; run: () => void }[] = [];
  private keepalive: ReturnType<typeof setTimeout> | undefined;
  private keepaliveMs = 0;
  /** What one turn of the event loop answers goes out as one write (PUBACKs for a burst of publishes). */
  private readonly out = new PacketBatch();
  /** Once the connection is being closed, nothing more is read from it or answered on it. */
  private closing = false;
  private readonly connectDeadline: ReturnType<typeof setTimeout>;

  constructor(
    private readonly socket: Socket,
    private readonly log: Logger,
    private readonly d: PublishBufferDeps,
    private readonly sessions: Sessions,
    /** The caller's SPIFFE ID (server and central listeners). */
    private readonly peer: string | undefined,
  ) {
    const ms = d.options.connectMs;
    this.connectDeadline = setTimeout(() => this.close(`no CONNECT within timeouts.read (${ms} ms)`), ms);
    const reader = new PacketReader(d.options.maxBytes + SLACK_BYTES, (p, raw) => this.packet(p, raw));
    socket.on("data", (chunk: Buffer) => this.received(reader, chunk));
    socket.on("error", () => {});
    // A client that closes its side without DISCONNECT is done all the same (the listener keeps sockets half-open).
    socket.on("end", () => this.finish());
    socket.once("close", () => this.closed());
    socket.resume();
  }

  private received(reader: PacketReader, chunk: Buffer): void {
    if (this.closing) return;
    try {
      reader.push(chunk);
    } catch (e) {
      if (e instanceof MalformedPacket)
        this.close(`malformed MQTT packet from the caller: ${e.message}`, Reason.malformed);
      else {
        // A fault of ours on one connection ends that connection, never the process.
        this.log.error("client connection failed", { error: e as Error });
        this.close(`internal error: ${(e as Error).message}`, Reason.unspecified);
      }
    }
  }

  private closed(): void {
    clearTimeout(this.keepalive);
    clearTimeout(this.connectDeadline);
    const s = this.session;
    if (s?.client === this.socket) {
      s.client = undefined;
      if (s.queue.messages === 0) this.sessions.end(s);
    }
  }

  private readonly flush = (): void => {
    if (this.out.empty) return;
    try {
      const b = this.out.take();
      if (!this.socket.destroyed) this.socket.write(b);
    } catch (e) {
      // Run from a microtask too: a fault of ours ends this connection, never the process.
      this.log.error("answering the client failed", { error: e as Error });
      this.socket.destroy();
    }
  };

  private readonly send = (p: Packet): void => {
    if (this.closing) return;
    const first = this.out.empty;
    this.out.add(p, this.version ?? 4);
    if (first) queueMicrotask(this.flush);
  };

  /** Ending our side leaves the socket half-open until the client closes its own: give it a while. */
  private readonly linger = (): void => {
    setTimeout(() => this.socket.destroy(), LINGER_MS).unref();
  };

  private finish(): void {
    this.flush();
    this.closing = true;
    this.socket.end(this.linger);
  }

  private readonly close = (reason: string, code?: number): void => {
    if (this.socket.destroyed || this.closing) return;
    this.flush();
    this.closing = true;
    this.log.warn("client connection closed", { reason });
    if (this.version === 5 && code !== undefined)
      this.socket.end(
        encode({ cmd: "disconnect", reasonCode: code, properties: { reasonString: reason } }, 5),
        this.linger,
      );
    else this.socket.destroy();
  };

  /** The keep-alive runs from the CONNECT on, and every packet pushes it back (one timer, refreshed). */
  private alive(): void {
    if (this.keepaliveMs === 0) return;
    if (this.keepalive) this.keepalive.refresh();
    else this.keepalive = setTimeout(() => this.close("keep alive expired", 0x8d), this.keepaliveMs);
  }

  private packet(p: Packet, raw: Buffer): void {
    if (this.closing) return; // the rest of a chunk after DISCONNECT or a refusal
    const session = this.session;
    if (!session) {
      if (p.cmd !== "connect") throw new MalformedPacket("the first packet must be CONNECT");
      clearTimeout(this.connectDeadline);
      this.connect(p);
      this.alive();
      return;
    }
    this.alive();
    const version = this.version;
    switch (p.cmd) {
      case "publish":
        this.publish(p, raw, session);
        return;
      case "pingreq":
        this.send({ cmd: "pingresp" });
        return;
      case "disconnect":
        this.finish();
        return;
      case "subscribe":
        this.log.warn("SUBSCRIBE refused", { reason: ONLY_PUBLISHING });
        this.send({
          cmd: "suback",
          messageId: p.messageId ?? 0,
          granted: p.subscriptions.map(() =>
            version === 5 ? Reason.implementationSpecific : Reason.subackFailure311,
          ),
          ...(version === 5 ? { properties: { reasonString: ONLY_PUBLISHING } } : {}),
        });
        return;
      case "unsubscribe":
        this.send({
          cmd: "unsuback",
          messageId: p.messageId ?? 0,
          granted: version === 5 ? p.unsubscriptions.map(() => 0x11) : [],
        } as Packet);
        return;
      default:
        this.close(`unexpected ${p.cmd.toUpperCase()} packet from a publishing client`, Reason.protocolError);
    }
  }

  /**
   * Refuses a CONNECT: CONNACK `code` with `told` as its reason string (MQTT 5) or return code `code311`,
   * a `CONNECT refused` log line with `logged`, and the connection ends.
   */
  private refuseConnect(
    version: MqttVersion,
    code: number,
    code311: number,
    told: string,
    logged: Record<string, unknown>,
  ): void {
    this.log.warn("CONNECT refused", logged);
    this.send(
      version === 5
        ? { cmd: "connack", reasonCode: code, sessionPresent: false, properties: { reasonString: told } }
        : { cmd: "connack", returnCode: code311, sessionPresent: false },
    );
    this.finish();
  }

  private connect(p: IConnectPacket): void {
    const version = p.protocolVersion ?? 4;
    this.version = version;
    let id = p.clientId;
    let assigned: string | undefined;
    if (!id) {
      if (version !== 5 && !p.clean) {
        this.send({ cmd: "connack", returnCode: 2, sessionPresent: false });
        this.finish();
        return;
      }
      id = assigned = `svc-${crypto.randomUUID()}`;
    }
    // MQTT 5 allows both, but neither could be passed on to the target: refused, not dropped unseen.
    const refusal =
      p.password !== undefined && p.username === undefined
        ? { why: "a password without a user name cannot be passed on by the publish buffer", code: 0x86 }
        : p.properties?.authenticationMethod !== undefined
          ? { why: "the publish buffer does not take part in MQTT 5 enhanced authentication", code: 0x8c }
          : p.properties?.authenticationData !== undefined
            ? { why: "authentication data without an authentication method", code: Reason.protocolError }
            : undefined;
    if (refusal) {
      this.refuseConnect(version, refusal.code, 4, refusal.why, { reason: refusal.why });
      return;
    }
    const session = this.sessions.attach(id, p, version, this.socket, this.peer);
    if (!session) {
      // The client hears only that it may not; the log line names it (its peer) and the identifier.
      this.refuseConnect(version, 0x87, 5, "this client identifier is in use by another workload", {
        reason: "the client identifier's session is another workload's",
        client_id: id,
      });
      return;
    }
    this.session = session;
    session.takenOver = () => {
      this.flush();
      this.closing = true;
      if (version === 5) this.socket.end(encode({ cmd: "disconnect", reasonCode: 0x8e }, 5), this.linger);
      else this.socket.destroy();
    };
    this.keepaliveMs = (p.keepalive ?? 0) * 1500;
    const notes =
      userProperty(p.properties, PROPERTY.level) !== undefined
        ? { userProperties: { [PROPERTY.error]: "buffered MQTT does not support notarization" } }
        : {};
    this.send({
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
    this.log.debug("session", { client_id: id, version, held: session.queue.messages });
  }

  private publish(p: IPublishPacket, raw: Buffer, s: Session): void {
    if (p.qos === 2) {
      this.close("QoS 2 is not supported by the publish buffer (use QoS 0 or 1)", Reason.qosNotSupported);
      return;
    }
    // mqtt-packet reads a QoS 1 PUBLISH without room for its packet identifier as identifier -1.
    const id = p.messageId ?? -1;
    if (p.qos === 1 && !(id >= 1 && id <= 65_535)) {
      this.close("malformed PUBLISH: QoS 1 without a packet identifier from 1 to 65535", Reason.malformed);
      return;
    }
    // A message the target would refuse must not be acknowledged: held, it would block its session.
    const layout = publishLayout(raw);
    const bad = badTopic(p, raw, layout) ?? badProperties(p, raw, layout as PublishLayout);
    if (bad) {
      this.close(`PUBLISH refused: ${bad.why}`, bad.code);
      return;
    }
    const v = this.version ?? 4;
    const m = publishFields(p, raw, v, layout, s.creds);
    // Answers go out in the order of the publishes (MQTT's rule for PUBACK), each once it is decided.
    const slot = { ready: false, run: () => {} };
    this.answers.push(slot);
    const decided = (run: () => void) => {
      slot.run = run;
      slot.ready = true;
      while (this.answers[0]?.ready) {
        const next = this.answers.shift() as typeof slot;
        try {
          next.run();
        } catch (e) {
          // One answer that fails ends only itself; the ones after it still go out.
          this.log.error("answering a publish failed", { error: e as Error });
        }
      }
    };
    const result = s.queue.offer(m, { packet: raw, version: v }, (error) =>
      decided(() => {
        // Kept: it is delivered whether or not its publisher is still there to be answered.
        if (!error) s.delivery.wake();
        if (!this.closing && !this.socket.destroyed)
          this.answer(error === undefined ? "queued" : { unstored: error }, p, s, v);
        if (error && !s.client && s.queue.messages === 0) this.sessions.end(s);
      }),
    );
    if (result !== "queued") decided(() => this.answer(result, p, s, v));
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
  ): void {
    // A failing PUBACK exists only in MQTT 5; a 3.1.1 client learns of a failure by the connection closing.
    const puback = (reasonCode?: number, reasonString?: string) => {
      if (p.qos !== 1 || (reasonCode && version !== 5)) return;
      this.send({
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
    this.close(why, Reason.quotaExceeded);
  }
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

/**
 * The properties a client's PUBLISH may carry (MQTT 5 section 3.3.2.3; topic aliases are refused above),
 * by mqtt-packet's names. Anything else would be passed on as received and refused by the target at every
 * delivery: a property of another packet (Malformed Packet), one of these twice but user properties, or a
 * Subscription Identifier, which only a server sends (Protocol Error).
 */
const PUBLISH_PROPERTIES: ReadonlySet<string> = new Set([
  "payloadFormatIndicator",
  "messageExpiryInterval",
  "topicAlias",
  "responseTopic",
  "correlationData",
  "userProperties",
  "contentType",
]);

/** User properties, the one property a packet may carry more than once. */
const USER_PROPERTY = 0x26;

function badProperties(
  p: IPublishPacket,
  raw: Buffer,
  layout: PublishLayout,
): { why: string; code: number } | undefined {
  if (!p.properties) return undefined;
  for (const name of Object.keys(p.properties)) {
    if (name === "subscriptionIdentifier")
      return { why: "a Subscription Identifier, which only a server sends", code: Reason.protocolError };
    if (!PUBLISH_PROPERTIES.has(name))
      return { why: `property ${name}, which a PUBLISH does not carry`, code: Reason.malformed };
  }
  const ids = publishPropertyIds(raw, layout, p.qos);
  if (!ids) return { why: "its properties do not read as properties", code: Reason.malformed };
  const seen = new Set<number>();
  for (const id of ids) {
    if (id !== USER_PROPERTY && seen.has(id))
      return {
        why: `property 0x${id.toString(16).padStart(2, "0")} more than once`,
        code: Reason.protocolError,
      };
    seen.add(id);
  }
  return undefined;
}

/** Control characters (U+0000–U+001F, U+007F–U+009F) and Unicode noncharacters. */
const UNWANTED = /[\p{Cc}\p{Noncharacter_Code_Point}]/u;
