/**
 * A session of the publish buffer (one client identifier): its queue, its delivery to the target, the
 * client attached to it, and what publish-buffer.ts and a client's connection (client-conn.ts) ask of each
 * other.
 */
import type { Socket } from "node:net";
import type { IConnectPacket } from "mqtt-packet";
import type { MqttVersion } from "../codec.ts";
import type { Credentials } from "./credentials.ts";
import type { Delivery } from "./delivery.ts";
import type { MessageQueue } from "./queue.ts";
import type { StoredSession } from "./store.ts";

export interface Session {
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

/** What a client's connection asks of the buffer that holds the sessions. */
export interface Sessions {
  /**
   * The session of `id`, created if new; a client already attached to it is disconnected (takeover).
   * Undefined when the session is another workload's (`peer`: the caller's SPIFFE ID, server and central
   * listeners): the client is refused, and the session left as it is.
   */
  attach(
    id: string,
    connect: IConnectPacket,
    version: MqttVersion,
    socket: Socket,
    peer: string | undefined,
  ): Session | undefined;
  /** Ends a session that has no client and nothing to deliver. */
  end(s: Session): void;
}
