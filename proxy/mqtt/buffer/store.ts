import type { IPublishPacket } from "mqtt-packet";
import type { MqttVersion } from "../codec.ts";

/**
 * Where a listener's publish buffer keeps what it acknowledged (docs/proxy-mqtt.md, "Storage"): nowhere
 * (`in-memory`, this file) or an SQLite file (`sqlite`, messages-sqlite.ts). The buffer hands every accepted
 * message to `add` and answers the publisher only from `add`'s callback, so with a file a PUBACK is sent
 * once the message is on disk; messages that leave the buffer are `remove`d.
 */

/** What the upstream CONNECT of a session is rebuilt from after a restart; never a password. */
export interface StoredSession {
  clientId: string;
  version: MqttVersion;
  protocolId: string;
  clean: boolean;
  keepalive: number;
  username?: string;
  /**
   * The SPIFFE ID of the workload whose clients use the session (server and central listeners): a client
   * of another workload cannot attach to it while it exists.
   */
  peer?: string;
}

/** A message as stored: the PUBLISH as its client sent it, in that client's protocol version. */
export interface StoredMessage {
  seq: number;
  clientId: string;
  version: MqttVersion;
  packet: Buffer;
  payloadBytes: number;
  enqueuedAt: number;
  /** The user name its publisher presented (never the password). */
  username?: string;
}

/** What a store held at start: sessions, and messages (oldest first) with their PUBLISH decoded. */
export interface Restored {
  sessions: StoredSession[];
  messages: (StoredMessage & { publish: IPublishPacket })[];
}

export interface BufferStore {
  /** What the store held at start (nothing for in-memory); handed out once. */
  restored(): Restored;
  /** The next message's sequence number: increasing across the listener's sessions, and after a restart above every stored one. */
  nextSeq(): number;
  /** A session begins: its upstream CONNECT is kept with its messages. */
  openSession(s: StoredSession): void;
  /** A session ended with nothing held. */
  endSession(clientId: string): void;
  /** Keeps a message; `done` is called once it is kept, or with why it could not be. */
  add(m: StoredMessage, done: (error?: string) => void): void;
  /** A message left the buffer (delivered, dropped or expired). */
  remove(seq: number): void;
  close(): void;
}

/** `storage.type: in-memory`: nothing outlives the process, and everything is kept at once. */
export class MemoryStore implements BufferStore {
  private seq = 0;
  restored(): Restored {
    return { sessions: [], messages: [] };
  }
  nextSeq(): number {
    return ++this.seq;
  }
  openSession(): void {}
  endSession(): void {}
  add(_m: StoredMessage, done: (error?: string) => void): void {
    done();
  }
  remove(): void {}
  close(): void {}
}
