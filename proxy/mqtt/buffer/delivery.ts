/**
 * Delivers one session's buffered messages to the target (docs/proxy-mqtt.md, "Reconnecting"):
 * connects on demand with the client's CONNECT, sends in order with up to MAX_IN_FLIGHT QoS 1 messages in
 * flight (fewer when an MQTT 5 target's CONNACK sets Receive Maximum) and up to BATCH messages per write,
 * removes a QoS 1 message on the target's PUBACK and a QoS 0 message once written. A failed attempt
 * requeues what was in flight or being written and retries after a delay that doubles from
 * reconnect-backoff.initial up to max, and returns to initial once a reconnection has delivered everything
 * held when it began (a successful replay). While it waits on the target — for the connection, the
 * CONNACK, a PUBACK or a PINGRESP — each attempt must make progress within reconnect-backoff.max. An
 * upstream with nothing to send for timeouts.idle is closed; the next message reconnects it. Each connection presents the credentials of the client that published the messages it
 * carries (docs/proxy-mqtt.md, "Whose credentials"): when the next message was published under others,
 * the connection is replaced once everything sent on it is settled.
 */
import type { Socket } from "node:net";
import mqtt, { type IConnectPacket, type IPubackPacket, type Packet } from "mqtt-packet";
import type { BufferOptions } from "../../config/types.ts";
import type { Logger } from "../../log.ts";
import type { Dialer } from "../../stream/dial.ts";
import { encode, type MqttVersion } from "../codec.ts";
import { type Credentials, refusesCredentials, sameCredentials } from "./credentials.ts";
import type { BufferEvents } from "./events.ts";
import type { MessageQueue, QueuedMessage } from "./queue.ts";

const MAX_IN_FLIGHT = 1024;
const BATCH = 64;
/** A write gathers messages up to this many bytes (a single larger message is written alone). */
const BATCH_BYTES = 256 * 1024;

type State = "idle" | "backoff" | "connecting" | "connected" | "closed";

export interface DeliveryDeps {
  dial: Dialer;
  options: BufferOptions;
  events: BufferEvents;
  log: Logger;
}

export class Delivery {
  private state: State = "idle";
  private socket: Socket | undefined;
  private delayMs: number;
  private failures = 0;
  /** A replay succeeds once the message with this sequence number (or a later one) is delivered. */
  private replayUntil = 0;
  private readonly byPacketId = new Map<number, QueuedMessage>();
  /** QoS 0 messages written on this connection, each write's, until the write completes. */
  private readonly unwritten = new Set<QueuedMessage[]>();
  /** A PINGREQ waits for its PINGRESP. */
  private pinged = false;
  /** Whose messages the current connection carries (or will, while it connects). */
  private creds: Credentials | undefined;
  /** What its CONNECT presented: a password given since (after a restart) is not refused yet. */
  private presentedNow: Credentials | undefined;
  private nextPacketId = 1;
  /** QoS 1 messages allowed in flight on this connection. */
  private window = MAX_IN_FLIGHT;
  /** What the target's CONNACK allows (MQTT 5 properties; a 3.1.1 target announces nothing). */
  private allows = ANYTHING;
  /** Which of the target's limits this connection has already logged. */
  private readonly logged = new Set<string>();
  /** Connection attempts begun; only the latest may act. */
  private attempts = 0;
  private blocked = false;
  /** A pump is due at the end of the current turn. */
  private pumpQueued = false;
  /** The target acknowledged messages since the last pump (the progress budget starts again). */
  private acked = false;
  private lastWrite = 0;
  private retryTimer: ReturnType<typeof setTimeout> | undefined;
  private progressTimer: ReturnType<typeof setTimeout> | undefined;
  private idleTimer: ReturnType<typeof setTimeout> | undefined;
  private pingTimer: ReturnType<typeof setInterval> | undefined;
  /** Called whenever nothing is held any more (the session may end). */
  onEmpty: () => void = () => {};

  /** `connect` is the session's upstream CONNECT without credentials: each connection adds its own. */
  constructor(
    private readonly connect: IConnectPacket,
    private readonly version: MqttVersion,
    private readonly queue: MessageQueue,
    private readonly d: DeliveryDeps,
  ) {
    this.delayMs = d.options.backoffInitialMs;
  }

  /**
   * New messages are queued: send them once the current turn has queued all it read (one write for a
   * burst), or connect first.
   */
  wake(): void {
    if (this.idleTimer) {
      clearTimeout(this.idleTimer);
      this.idleTimer = undefined;
    }
    if (this.state === "idle") this.start();
    else if (this.state === "connected") this.pumpSoon();
  }

  /** Pumps once the current turn is done: after all it read was queued, or all PUBACKs it read were taken. */
  private pumpSoon(): void {
    if (this.pumpQueued) return;
    this.pumpQueued = true;
    queueMicrotask(() => {
      this.pumpQueued = false;
      if (this.state !== "connected") return;
      try {
        if (this.acked) {
          this.acked = false;
          this.progressed();
        }
        this.pump();
      } catch (e) {
        // A fault of ours fails this attempt (retried later), never the process.
        this.fail(`sending to the target failed: ${(e as Error).message}`);
      }
    });
  }

  /** Ends delivery: a connected upstream is sent DISCONNECT, a connection in progress is dropped. */
  close(): void {
    const wasConnected = this.state === "connected";
    this.state = "closed";
    this.clearTimers();
    this.unwritten.clear();
    if (wasConnected) this.socket?.end(encode({ cmd: "disconnect" }, this.version));
    else this.socket?.destroy();
    this.socket = undefined;
  }

  private clearTimers(): void {
    clearTimeout(this.retryTimer);
    this.stopProgress();
    clearTimeout(this.idleTimer);
    clearInterval(this.pingTimer);
  }

  /**
   * Does the connection wait on the target: for a PUBACK or a PINGRESP? (Room to write is no such wait:
   * a slow link drains the runtime's and the kernel's megabytes only now and then, while alive. A link
   * that stops reading is found by the keep-alive: nothing is written while blocked, so a PINGREQ follows.)
   */
  private waitsOnTarget(): boolean {
    return this.byPacketId.size > 0 || this.pinged;
  }

  /** The target did something awaited: the budget starts again while more is awaited, else it stops. */
  private progressed(): void {
    if (this.waitsOnTarget()) this.expectProgress();
    else this.stopProgress();
  }

  /** Starts the budget unless it runs already (a new wait is no progress). */
  private awaitProgress(): void {
    if (!this.progressTimer) this.expectProgress();
  }

  /** Arms (or re-arms) the replay budget: without progress within backoff max, the attempt fails. */
  private expectProgress(): void {
    // Re-armed on every PUBACK: refreshing the one timer costs less than a new one each time.
    if (this.progressTimer) this.progressTimer.refresh();
    else
      this.progressTimer = setTimeout(() => {
        this.progressTimer = undefined;
        this.fail(`no progress within reconnect-backoff.max (${this.d.options.backoffMaxMs} ms)`);
      }, this.d.options.backoffMaxMs);
  }

  private stopProgress(): void {
    clearTimeout(this.progressTimer);
    this.progressTimer = undefined;
  }

  /** An attempt whose own failure (a CONNECT that cannot be encoded, say) fails it like any other. */
  private start(): void {
    this.attempt().catch((e: Error) => this.fail(e.message));
  }

  private async attempt(): Promise<void> {
    const first = this.queue.peek();
    if (!first) {
      // What was held expired meanwhile, or is not stored yet (its storing wakes delivery again).
      this.state = "idle";
      return;
    }
    this.state = "connecting";
    const creds = first.creds;
    this.creds = creds;
    this.presentedNow = { ...creds };
    // A dial that outlives its attempt (failed by the progress budget) must not touch a later one.
    const attempt = ++this.attempts;
    if (this.failures > 0) this.replayUntil = this.queue.newest;
    this.expectProgress();
    let socket: Socket;
    try {
      socket = (await this.d.dial()).socket;
    } catch (e) {
      if (attempt === this.attempts) this.fail((e as Error).message);
      return;
    }
    if (this.state !== "connecting" || attempt !== this.attempts) {
      socket.destroy();
      return;
    }
    this.socket = socket;
    this.blocked = false;
    this.pinged = false;
    // Every event of this socket is ignored once it is no longer the delivery's socket.
    const current = () => this.socket === socket;
    const parser = mqtt.parser({ protocolVersion: this.version });
    parser.on("packet", (p: Packet) => {
      if (current()) this.onPacket(p);
    });
    parser.on("error", (e: Error) => {
      if (current()) this.fail(`malformed MQTT packet from the target: ${e.message}`);
    });
    socket.on("data", (chunk: Buffer) => {
      try {
        parser.parse(chunk);
      } catch (e) {
        if (current()) this.fail(`the target's packets could not be handled: ${(e as Error).message}`);
      }
    });
    socket.on("drain", () => {
      if (!current()) return;
      this.blocked = false;
      this.progressed();
      this.pump();
    });
    socket.on("error", (e) => {
      if (current()) this.fail(e.message);
    });
    // The dialled socket is half-open: the target's end of stream is its close.
    socket.on("end", () => {
      if (current()) this.fail("the target closed the connection");
    });
    socket.on("close", () => {
      if (current()) this.fail("the target closed the connection");
    });
    this.write(
      encode(
        {
          ...this.connect,
          ...(creds.username !== undefined ? { username: creds.username } : {}),
          ...(creds.password !== undefined ? { password: creds.password } : {}),
        },
        this.version,
      ),
    );
  }

  private onPacket(p: Packet): void {
    if (p.cmd === "connack") {
      if (this.state !== "connecting") return;
      const code = p.reasonCode ?? p.returnCode ?? 0;
      if (code !== 0) {
        const creds = this.creds as Credentials;
        if (
          refusesCredentials(code, this.version) &&
          sameCredentials(creds, this.presentedNow as Credentials) &&
          this.queue.waitsWithOther(creds)
        ) {
          // They would block the messages of the session's later clients for good.
          const dropped = this.queue.refuseUnder(creds);
          this.d.log.warn(
            "messages dropped: the target refused their publisher's credentials, and later messages were published under others",
            { dropped, reason_code: code },
          );
        }
        this.fail(`the target refused CONNECT with reason code 0x${code.toString(16)}${said(p)}`);
        return;
      }
      if (p.properties?.receiveMaximum === 0 || p.properties?.maximumPacketSize === 0) {
        this.fail("the target's CONNACK sets Receive Maximum or Maximum Packet Size to 0 (a protocol error)");
        return;
      }
      this.d.events.connect("ok");
      this.state = "connected";
      this.window = Math.min(MAX_IN_FLIGHT, p.properties?.receiveMaximum ?? MAX_IN_FLIGHT);
      this.allows = {
        qos: p.properties?.maximumQoS === 0 ? 0 : 1,
        retain: p.properties?.retainAvailable !== false,
        packetBytes: p.properties?.maximumPacketSize ?? Number.POSITIVE_INFINITY,
      };
      this.logged.clear();
      this.d.log.debug("upstream connected", { failures: this.failures });
      // PINGREQ after half the keep-alive without a write; with a keep-alive of 0 (none) after 30 s all the
      // same (MQTT allows a PINGREQ at any time): it is how a link that stopped reading is found.
      const pingMs = ((this.connect.keepalive || 60) * 1000) / 2;
      clearInterval(this.pingTimer);
      this.pingTimer = setInterval(() => {
        if (this.pinged || Date.now() - this.lastWrite < pingMs) return;
        this.pinged = true;
        this.awaitProgress();
        this.write(encode({ cmd: "pingreq" }, this.version));
      }, pingMs);
      this.stopProgress();
      this.pump();
    } else if (p.cmd === "puback") this.onPuback(p);
    else if (p.cmd === "pingresp") {
      this.pinged = false;
      this.progressed();
    } else if (p.cmd === "disconnect")
      this.fail(`the target sent DISCONNECT (reason code 0x${(p.reasonCode ?? 0).toString(16)}${said(p)})`);
  }

  private onPuback(p: IPubackPacket): void {
    const m = this.byPacketId.get(p.messageId ?? 0);
    if (!m) return;
    this.byPacketId.delete(p.messageId ?? 0);
    if ((p.reasonCode ?? 0) >= 0x80) {
      this.d.log.warn("target refused a message", { topic: m.topic, reason_code: p.reasonCode });
      this.queue.refused(m);
    } else this.queue.delivered(m);
    if (this.failures > 0 && m.seq >= this.replayUntil) this.replayed();
    this.acked = true;
    this.pumpSoon();
  }

  private replayed(): void {
    this.d.log.info("upstream replay complete", { after_failures: this.failures });
    this.failures = 0;
    this.delayMs = this.d.options.backoffInitialMs;
  }

  /** Sends what the window allows, as one write (one TLS record for a burst of small messages). */
  private pump(): void {
    if (this.state !== "connected" || !this.socket) return;
    let switching = false;
    for (
      let more = true;
      more && !switching && !this.blocked && this.state === "connected" && !this.socket?.destroyed;
    ) {
      const out: Outgoing[] = [];
      const qos0: QueuedMessage[] = [];
      let bytes = 0;
      while (out.length < BATCH && this.byPacketId.size < this.window && bytes < BATCH_BYTES) {
        const m = this.queue.take(this.creds);
        if (!m) {
          // Nothing more, or the next message was published under other credentials.
          switching = this.queue.peek() !== undefined;
          break;
        }
        const o = this.outgoing(m);
        if (!o) continue;
        out.push(o);
        bytes += o.bytes.length;
        if (m.qos === 0) qos0.push(m);
      }
      more = out.length === BATCH || bytes >= BATCH_BYTES;
      if (out.length === 0) break;
      if (qos0.length > 0) this.unwritten.add(qos0);
      this.write(
        joined(out, bytes),
        qos0.length === 0
          ? undefined
          : (e) => {
              // Once their connection failed, they are back among those waiting already (fail).
              if (!this.unwritten.delete(qos0)) return;
              if (e) {
                // Back in their places, to be sent again by the retry.
                this.queue.unsent(qos0);
                this.fail(`writing to the target failed: ${e.message}`);
                return;
              }
              for (const m of qos0) this.queue.delivered(m);
              if (this.state === "connected") this.pump();
            },
      );
    }
    if (switching && this.state === "connected" && this.byPacketId.size === 0 && this.unwritten.size === 0) {
      // Everything sent on this connection is settled: the next messages go out under their own credentials.
      this.d.log.debug("upstream reconnecting: the next messages were published under other credentials");
      this.drop();
      this.state = "idle";
      this.start();
      return;
    }
    if (this.byPacketId.size === 0 && this.queue.messages === 0) {
      if (this.failures > 0) this.replayed();
      this.idle();
      this.onEmpty();
    }
  }

  /** A message as the PUBLISH to send now; a QoS 1 one is in flight under a packet identifier from here. */
  private outgoing(m: QueuedMessage): Outgoing | undefined {
    this.withinLimits(m);
    const id = m.qos === 1 ? this.packetId() : undefined;
    const dup = m.qos === 1 && m.sent;
    const wire = m.wire?.version === this.version ? m.wire : undefined;
    const bytes = wire ? wire.packet : this.encoded(m, id, dup);
    if (!bytes) return undefined;
    if (bytes.length > this.allows.packetBytes) {
      this.limited(
        "size",
        `a PUBLISH larger than the target's Maximum Packet Size (${this.allows.packetBytes} bytes) is dropped`,
        m,
      );
      this.queue.discard(m);
      return undefined;
    }
    const o: Outgoing = wire ? { bytes, patch: { id, idAt: wire.idAt, dup } } : { bytes };
    m.sent = true;
    if (id !== undefined) {
      this.byPacketId.set(id, m);
      if (this.byPacketId.size === 1) this.awaitProgress();
    }
    return o;
  }

  /**
   * A message the target's CONNACK does not allow as it is, but can take otherwise, is changed to fit: a
   * QoS 1 message is sent at QoS 0 where Maximum QoS is 0, and without its retain flag where Retain
   * Available is 0 (docs/proxy-mqtt.md, "What the target allows"). Either is logged once per connection.
   */
  private withinLimits(m: QueuedMessage): void {
    if (m.qos > this.allows.qos) {
      this.limited("qos", "the target allows QoS 0 only (Maximum QoS): QoS 1 messages are sent at QoS 0", m);
      this.queue.downgrade(m);
    }
    if (m.retain && !this.allows.retain) {
      this.limited(
        "retain",
        "the target keeps no retained messages (Retain Available): retain flags are cleared",
        m,
      );
      m.retain = false;
      m.wire = undefined;
    }
  }

  private limited(kind: string, what: string, m: QueuedMessage): void {
    if (this.logged.has(kind)) return;
    this.logged.add(kind);
    this.d.log.warn(what, { topic: m.topic });
  }

  /** A message written anew for the target, when its PUBLISH as received cannot be sent on. */
  private encoded(m: QueuedMessage, id: number | undefined, dup: boolean): Buffer | undefined {
    const publish = {
      cmd: "publish" as const,
      topic: m.topic,
      payload: m.payload,
      qos: m.qos,
      retain: m.retain,
      dup,
      ...(m.properties && this.version === 5 ? { properties: m.properties } : {}),
    };
    try {
      return encode(id === undefined ? publish : { ...publish, messageId: id }, this.version);
    } catch (e) {
      // One message that cannot be written (mqtt-packet refuses it) is dropped, not the delivery.
      this.d.log.error("message cannot be encoded for the target, dropped", {
        topic: m.topic,
        error: (e as Error).message,
      });
      this.queue.discard(m);
      return undefined;
    }
  }

  private packetId(): number {
    for (;;) {
      const id = this.nextPacketId;
      this.nextPacketId = id === 65_535 ? 1 : id + 1;
      if (!this.byPacketId.has(id)) return id;
    }
  }

  private write(b: Buffer, done?: (e?: Error | null) => void): void {
    const s = this.socket;
    if (!s || s.destroyed) {
      done?.(new Error("not connected"));
      this.fail("the connection to the target is gone");
      return;
    }
    this.lastWrite = Date.now();
    if (!s.write(b, done)) this.blocked = true;
  }

  /** Nothing to send: close the upstream after timeouts.idle. */
  private idle(): void {
    clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => {
      if (this.state !== "connected" || this.queue.messages > 0) return;
      this.d.log.info("upstream idle, closing", { idle_ms: this.d.options.idleMs });
      const s = this.socket;
      this.socket = undefined;
      this.state = "idle";
      this.blocked = false;
      this.pinged = false;
      clearInterval(this.pingTimer);
      s?.end(encode({ cmd: "disconnect" }, this.version));
    }, this.d.options.idleMs);
  }

  private fail(reason: string): void {
    if (this.state === "closed" || this.state === "backoff" || this.state === "idle") return;
    if (this.state === "connecting") this.d.events.connect("failed");
    // First: nothing that ending the connection sets off can fail this attempt a second time.
    this.state = "backoff";
    this.drop();
    this.failures++;
    const delay = this.delayMs;
    this.delayMs = Math.min(this.delayMs * 2, this.d.options.backoffMaxMs);
    this.d.log.warn("upstream failed", { reason, retry_in_ms: delay, held: this.queue.messages });
    this.retryTimer = setTimeout(() => {
      this.state = "idle";
      if (this.queue.messages > 0) this.start();
    }, delay);
  }

  /** Ends this connection: what was in flight or being written goes back among the messages waiting. */
  private drop(): void {
    this.clearTimers();
    const s = this.socket;
    this.socket = undefined;
    this.blocked = false;
    this.pinged = false;
    this.byPacketId.clear();
    for (const qos0 of this.unwritten) this.queue.unsent(qos0);
    this.unwritten.clear();
    this.queue.requeueInflight();
    // Last: destroying the socket calls its pending writes' callbacks at once, which find nothing to do.
    s?.destroy();
  }
}

/** The reason string of a CONNACK or DISCONNECT, for the log. */
function said(p: { properties?: { reasonString?: string } }): string {
  const why = p.properties?.reasonString;
  return why ? `: ${JSON.stringify(why)}` : "";
}

/** Before a CONNACK says otherwise. */
const ANYTHING = { qos: 1, retain: true, packetBytes: Number.POSITIVE_INFINITY };

/**
 * A PUBLISH on its way to the target: written anew (`bytes` as they go), or as its client sent it, which
 * needs only its DUP flag and, at QoS 1, the target's packet identifier set (`patch`).
 */
interface Outgoing {
  bytes: Buffer;
  patch?: { id: number | undefined; idAt: number; dup: boolean };
}

/** The PUBLISHes of one write, in one buffer. */
function joined(out: Outgoing[], size: number): Buffer {
  const b = Buffer.allocUnsafe(size);
  let at = 0;
  for (const o of out) {
    o.bytes.copy(b, at);
    if (o.patch) {
      b[at] = ((b[at] as number) & ~0x08) | (o.patch.dup ? 0x08 : 0);
      if (o.patch.id !== undefined) b.writeUInt16BE(o.patch.id, at + o.patch.idAt);
    }
    at += o.bytes.length;
  }
  return b;
}
