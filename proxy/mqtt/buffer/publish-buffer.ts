import type { Socket } from "node:net";
import type { IConnectPacket, IPublishPacket, Packet } from "mqtt-packet";
import type { Logger } from "../../log.ts";
import type { Dialer } from "../../stream/dial.ts";
import { encode, type MqttVersion, PacketDecoder, Reason, userProperty } from "../codec.ts";
import { MalformedPacket, MqttFramer } from "../framer.ts";
import { PROPERTY } from "../notarize.ts";
import { Delivery } from "./delivery.ts";
import type { BufferEvents } from "./events.ts";
import type { BufferOptions } from "./options.ts";
import { MessageQueue, type Offer } from "./queue.ts";

/**
 * The MQTT publish buffer (docs/proxy-mqtt.md, "The publish buffer"): client connections are answered
 * here — a local CONNACK that does not confirm broker acceptance, a PUBACK once a QoS 1 message is queued
 * — and each session (client identifier) has its own in-memory queue, delivered to the target by its own
 * upstream connection. Only publishing: SUBSCRIBE, QoS 2 and notarization are refused with MQTT's reason
 * codes. A client that reconnects with the same identifier takes its session over, queue included; a
 * session ends when no client is connected and its queue is empty. Everything is lost at process exit.
 */
export interface PublishBufferDeps {
  options: BufferOptions;
  dial: Dialer;
  events: BufferEvents;
  log: Logger;
}

interface Session {
  id: string;
  queue: MessageQueue;
  delivery: Delivery;
  client: Socket | undefined;
  /** The MQTT version the attached client speaks. */
  clientVersion: MqttVersion;
}

const ONLY_PUBLISHING = "svc-proxy's MQTT publish buffer carries publishing connections only";
const SLACK_BYTES = 64 * 1024;

export class PublishBuffer {
  private readonly sessions = new Map<string, Session>();

  constructor(private readonly d: PublishBufferDeps) {}

  close(): void {
    for (const s of this.sessions.values()) {
      s.delivery.close();
      s.queue.clear();
      s.client?.destroy();
    }
    this.sessions.clear();
  }

  accept(socket: Socket, log: Logger): void {
    const o = this.d.options;
    let session: Session | undefined;
    let version: MqttVersion | undefined;
    const decoder = new PacketDecoder();
    let keepalive: ReturnType<typeof setTimeout> | undefined;
    let keepaliveMs = 0;
    const send = (p: Packet) => socket.write(encode(p, version ?? 4));
    const close = (reason: string, code?: number) => {
      if (socket.destroyed) return;
      log.warn("client connection closed", { reason });
      if (version === 5 && code !== undefined)
        socket.end(encode({ cmd: "disconnect", reasonCode: code, properties: { reasonString: reason } }, 5));
      else socket.destroy();
    };

    const onConnect = (p: IConnectPacket) => {
      version = p.protocolVersion ?? 4;
      let id = p.clientId;
      let assigned: string | undefined;
      if (!id) {
        if (version !== 5 && !p.clean) {
          send({ cmd: "connack", returnCode: 2, sessionPresent: false });
          socket.end();
          return;
        }
        id = assigned = `svc-${crypto.randomUUID()}`;
      }
      session = this.attach(id, p, version, socket);
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

    const onPublish = (p: IPublishPacket, s: Session) => {
      if (p.qos === 2) {
        close("QoS 2 is not supported by the publish buffer (use QoS 0 or 1)", Reason.qosNotSupported);
        return;
      }
      const payload = Buffer.isBuffer(p.payload) ? p.payload : Buffer.from(p.payload);
      const { topicAlias: _alias, subscriptionIdentifier: _sub, ...properties } = p.properties ?? {};
      const result = s.queue.offer({
        topic: p.topic,
        payload,
        qos: p.qos,
        retain: p.retain,
        ...(p.properties ? { properties } : {}),
      });
      this.answer(result, p, s, version ?? 4, send, close);
    };

    const onPacket = (raw: Buffer) => {
      const p = decoder.decode(raw);
      if (keepaliveMs > 0) {
        clearTimeout(keepalive);
        keepalive = setTimeout(() => close("keep alive expired", 0x8d), keepaliveMs);
      }
      if (!session) {
        if (p.cmd !== "connect") throw new MalformedPacket("the first packet must be CONNECT");
        onConnect(p);
        return;
      }
      switch (p.cmd) {
        case "publish":
          return onPublish(p, session);
        case "pingreq":
          return void send({ cmd: "pingresp" });
        case "disconnect":
          return void socket.end();
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

    const framer = new MqttFramer({
      whole: () => true,
      maxWholeBytes: o.maxBytes + SLACK_BYTES,
      packet: onPacket,
      bytes: () => {},
    });
    socket.on("data", (chunk: Buffer) => {
      try {
        framer.push(chunk);
      } catch (e) {
        if (!(e instanceof MalformedPacket)) throw e;
        close(`malformed MQTT packet from the caller: ${e.message}`, Reason.malformed);
      }
    });
    socket.on("error", () => {});
    socket.once("close", () => {
      clearTimeout(keepalive);
      if (session?.client === socket) {
        session.client = undefined;
        if (session.queue.messages === 0) this.end(session);
      }
    });
    socket.resume();
  }

  /** Answers a PUBLISH by what the queue made of it (docs/proxy-mqtt.md, "Limits and overflow"). */
  private answer(
    result: Offer,
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
      result === "rejected"
        ? `publish buffer full (${s.queue.messages} messages, ${s.queue.payloadBytes} payload bytes; overflow-policy reject)`
        : `message of ${p.payload.length} bytes is larger than the buffer's storage.max-bytes (${this.d.options.maxBytes})`;
    if (result === "oversized" && version === 5 && p.qos === 1) {
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
      const old = s.client;
      s.client = undefined;
      if (s.clientVersion === 5) old.end(encode({ cmd: "disconnect", reasonCode: 0x8e }, 5));
      else old.destroy();
    }
    if (!s) {
      const queue = new MessageQueue(this.d.options, this.d.events);
      const upstreamConnect: IConnectPacket = {
        cmd: "connect",
        clientId: id,
        protocolVersion: version,
        protocolId: connect.protocolId ?? "MQTT",
        clean: connect.clean ?? true,
        keepalive: connect.keepalive ?? 60,
        ...(connect.username !== undefined ? { username: connect.username } : {}),
        ...(connect.password !== undefined ? { password: connect.password } : {}),
      };
      const delivery = new Delivery(upstreamConnect, version, queue, {
        ...this.d,
        log: this.d.log.with({ client_id: id }),
      });
      const created: Session = { id, queue, delivery, client: undefined, clientVersion: version };
      delivery.onEmpty = () => {
        if (!created.client) this.end(created);
      };
      this.sessions.set(id, created);
      s = created;
    }
    s.client = socket;
    s.clientVersion = version;
    return s;
  }

  private end(s: Session): void {
    if (this.sessions.get(s.id) !== s) return;
    this.sessions.delete(s.id);
    s.delivery.close();
  }
}
