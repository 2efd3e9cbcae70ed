/**
 * The MQTT publish buffer (docs/proxy-mqtt.md, "The publish buffer"): client connections are answered
 * here (client-conn.ts) — a local CONNACK that does not confirm broker acceptance, a PUBACK once a QoS 1
 * message is queued — and each session (client identifier) has its own in-memory queue, delivered to the target by its own
 * upstream connection. Only publishing: SUBSCRIBE, QoS 2 and notarization are refused with MQTT's reason
 * codes. A client that reconnects with the same identifier takes its session over, queue included; a
 * session ends when no client is connected and its queue is empty. What outlives the process is the
 * store's affair (store.ts): with a file, the sessions and messages it holds are delivered again at start,
 * before any client connects.
 */
import type { Socket } from "node:net";
import type { IConnectPacket } from "mqtt-packet";
import type { BufferOptions } from "../../config/types.ts";
import type { Logger } from "../../log.ts";
import type { Dialer } from "../../stream/dial.ts";
import type { MqttVersion } from "../codec.ts";
import { publishLayout } from "../publish-layout.ts";
import { ClientConn } from "./client-conn.ts";
import { type Credentials, presented, sameCredentials } from "./credentials.ts";
import { Delivery } from "./delivery.ts";
import type { BufferEvents } from "./events.ts";
import { publishFields } from "./publish-fields.ts";
import { MessageQueue } from "./queue.ts";
import type { Session, Sessions } from "./session.ts";
import type { BufferStore, StoredSession } from "./store.ts";

export interface PublishBufferDeps {
  options: BufferOptions;
  dial: Dialer;
  events: BufferEvents;
  log: Logger;
  store: BufferStore;
}

export class PublishBuffer implements Sessions {
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

  /** Serves one client's connection (client-conn.ts). */
  accept(socket: Socket, log: Logger, peer: string | undefined): void {
    new ClientConn(socket, log, this.d, this, peer);
  }

  /** The session of `id`, created if new; a client already attached to it is disconnected (takeover). */
  attach(
    id: string,
    connect: IConnectPacket,
    version: MqttVersion,
    socket: Socket,
    peer: string | undefined,
  ): Session | undefined {
    let s = this.sessions.get(id);
    // A client identifier is a workload's: another's client may not take over its session or its messages.
    if (s && peer !== undefined && s.stored.peer !== undefined && s.stored.peer !== peer) return undefined;
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
      // Never the object of restored messages still waiting for a password: the next client to give one
      // would fill it in for this client's messages too.
      if (!sameCredentials(s.creds, creds) || s.unfilled.includes(s.creds)) s.creds = creds;
      const { username: _, ...rest } = s.stored;
      const stored = {
        ...rest,
        ...(creds.username !== undefined ? { username: creds.username } : {}),
        ...(peer !== undefined ? { peer } : {}),
      };
      if (s.restored || stored.username !== s.stored.username || stored.peer !== s.stored.peer)
        this.d.store.openSession(stored);
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
        ...(peer !== undefined ? { peer } : {}),
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

  end(s: Session): void {
    if (this.sessions.get(s.id) !== s) return;
    this.sessions.delete(s.id);
    s.delivery.close();
    this.d.store.endSession(s.id);
  }
}
