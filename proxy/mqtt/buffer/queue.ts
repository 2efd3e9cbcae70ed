/**
 * One client session's publish buffer (docs/proxy-mqtt.md, "Limits and overflow"): messages in arrival
 * order, bounded by payload bytes and count, with the overflow policies. A message leaves when the target
 * acknowledged it (QoS 1), when it was written (QoS 0), or when it is dropped; messages sent but not yet
 * acknowledged stay counted (in flight) and go back to the front when the connection fails. Every message
 * is handed to the listener's store (store.ts) when it is queued and removed from it when it leaves; it is
 * sent only once the store has kept it, so messages go out in order and never ahead of their storage.
 */
import type { BufferOptions } from "../../config/types.ts";
import type { MqttVersion } from "../codec.ts";
import type { Credentials } from "./credentials.ts";
import type { BufferEvents } from "./events.ts";
import type { BufferStore } from "./store.ts";

export interface QueuedMessage {
  seq: number;
  topic: string;
  payload: Buffer;
  qos: 0 | 1;
  retain: boolean;
  /** MQTT 5 PUBLISH properties, passed on. */
  properties?: Record<string, unknown>;
  /** The PUBLISH as its client sent it, when it may be sent on as it is (delivery.ts). */
  wire?: Wire;
  enqueuedAt: number;
  /** Sent at least once before (a resend carries the DUP flag). */
  sent: boolean;
  /** The store has it: it may be sent. */
  kept: boolean;
  /** Those of the client that published it: it goes to the target under these only. */
  creds: Credentials;
}

/** A PUBLISH packet as received, the protocol version it is written in, and where its packet identifier goes. */
export interface Wire {
  packet: Buffer;
  version: MqttVersion;
  idAt: number;
}

export type Offer = "queued" | "dropped" | "rejected" | "oversized";

type Limits = Pick<BufferOptions, "maxBytes" | "maxMessages" | "maxTtlMs" | "overflow">;

export class MessageQueue {
  /** Waiting to be sent on the current connection, oldest first. */
  private waiting: QueuedMessage[] = [];
  private head = 0;
  /** Sent and awaiting the target's acknowledgement, by sequence number (oldest first). */
  private readonly inflight = new Map<number, QueuedMessage>();
  private bytes = 0;
  private seq = 0;
  /** QoS 0 messages taken and not yet written. */
  private writing = 0;

  constructor(
    private readonly clientId: string,
    private readonly limits: Limits,
    private readonly events: BufferEvents,
    private readonly store: BufferStore,
    private readonly now: () => number = Date.now,
  ) {}

  /** Held: waiting, in flight (QoS 1) and being written (QoS 0). */
  get messages(): number {
    return this.waiting.length - this.head + this.inflight.size + this.writing;
  }
  get payloadBytes(): number {
    return this.bytes;
  }
  get inFlight(): number {
    return this.inflight.size;
  }

  /**
   * Adds a message under the overflow policy and hands it to the store with its PUBLISH packet as the
   * client sent it (`packet`, in protocol `version`). `kept` is called once the store has it, or with why
   * it could not keep it (the message is then withdrawn): only then may the publisher be answered.
   */
  offer(
    m: Omit<QueuedMessage, "seq" | "enqueuedAt" | "sent" | "kept">,
    wire: Pick<Wire, "packet" | "version">,
    kept: (error?: string) => void,
  ): Offer {
    const size = m.payload.length;
    const { maxBytes, maxMessages, overflow } = this.limits;
    const fits = () => this.bytes + size <= maxBytes && (maxMessages === 0 || this.messages < maxMessages);
    if (!fits()) this.expireOld();
    if (!fits()) {
      if (overflow === "drop-newest") {
        this.events.dropped("overflow");
        return "dropped";
      }
      if (overflow === "reject") {
        this.events.dropped("rejected");
        return "rejected";
      }
      if (size > maxBytes) {
        this.events.dropped("oversized");
        return "oversized";
      }
      // Messages being written cannot be evicted: past them the new message is held over the limit (they
      // leave once written).
      while (!fits() && this.evictOldest());
    }
    const q: QueuedMessage = {
      ...m,
      seq: this.store.nextSeq(),
      enqueuedAt: this.now(),
      sent: false,
      kept: false,
    };
    this.seq = q.seq;
    this.waiting.push(q);
    this.bytes += size;
    this.events.depth(1, size);
    const stored = {
      seq: q.seq,
      clientId: this.clientId,
      packet: wire.packet,
      version: wire.version,
      payloadBytes: size,
      enqueuedAt: q.enqueuedAt,
      ...(q.creds.username !== undefined ? { username: q.creds.username } : {}),
    };
    this.store.add(stored, (error) => {
      if (error) this.withdraw(q);
      else q.kept = true;
      kept(error);
    });
    return "queued";
  }

  /** A message read back from the store at start: held again, whatever the limits say now. */
  restore(m: QueuedMessage): void {
    this.seq = Math.max(this.seq, m.seq);
    this.waiting.push(m);
    this.bytes += m.payload.length;
    this.events.depth(1, m.payload.length);
  }

  /** The store could not keep a queued message: it leaves, unsent (it cannot have been sent). */
  private withdraw(m: QueuedMessage): void {
    const at = this.waiting.indexOf(m, this.head);
    if (at < 0) return; // evicted or expired meanwhile
    this.waiting.splice(at, 1);
    this.release(m, "storage");
  }

  /** The message take() would return next, left waiting (expired ones before it are dropped). */
  peek(): QueuedMessage | undefined {
    for (;;) {
      const m = this.waiting[this.head];
      if (!m?.kept) return undefined;
      if (!this.expired(m)) return m;
      this.waiting[this.head++] = undefined as unknown as QueuedMessage;
      this.compact();
      this.release(m, "expired");
    }
  }

  /**
   * The next message to send, skipping (and dropping) expired ones; it is counted in flight if QoS 1.
   * With `creds`, only one published under them (else it stays waiting).
   */
  take(creds?: Credentials): QueuedMessage | undefined {
    const m = this.peek();
    if (!m || (creds && m.creds !== creds)) return undefined;
    this.waiting[this.head++] = undefined as unknown as QueuedMessage;
    this.compact();
    if (m.qos === 1) this.inflight.set(m.seq, m);
    else this.writing++;
    return m;
  }

  /** Does a message wait that was published under other credentials than `creds`? */
  waitsWithOther(creds: Credentials): boolean {
    for (let i = this.head; i < this.waiting.length; i++)
      if ((this.waiting[i] as QueuedMessage).creds !== creds) return true;
    return false;
  }

  /**
   * The target refused `creds`, and later messages were published under others: the waiting messages
   * under `creds` before those leave as refused (they cannot go out under their publisher's name). How
   * many left.
   */
  refuseUnder(creds: Credentials): number {
    let n = 0;
    for (let m = this.waiting[this.head]; m?.creds === creds; m = this.waiting[this.head]) {
      this.waiting[this.head++] = undefined as unknown as QueuedMessage;
      this.release(m, "refused");
      n++;
    }
    this.compact();
    return n;
  }

  /** A QoS 0 message written, or a QoS 1 message acknowledged: it leaves the buffer. */
  delivered(m: QueuedMessage): void {
    if (m.qos === 1 && !this.inflight.delete(m.seq)) return; // evicted meanwhile
    if (m.qos === 0) this.writing--;
    this.release(m);
    this.events.delivered();
  }

  /** The target refused a QoS 1 message (a PUBACK with an error reason code): it is not sent again. */
  refused(m: QueuedMessage): void {
    if (!this.inflight.delete(m.seq)) return;
    this.release(m, "refused");
  }

  /** A QoS 1 message just taken is to be sent at QoS 0: it leaves once written, as QoS 0 messages do. */
  downgrade(m: QueuedMessage): void {
    if (m.qos === 0 || !this.inflight.delete(m.seq)) return;
    m.qos = 0;
    m.wire = undefined;
    this.writing++;
  }

  /** A taken message that cannot be sent at all leaves as refused. */
  discard(m: QueuedMessage): void {
    if (m.qos === 0) this.writing--;
    else this.inflight.delete(m.seq);
    this.release(m, "refused");
  }

  /** The sequence number of the newest message queued (0 when none ever was). */
  get newest(): number {
    return this.seq;
  }

  /** QoS 0 messages whose write failed go back among those waiting, to be written again. */
  unsent(ms: QueuedMessage[]): void {
    this.writing -= ms.length;
    this.putBack(ms);
  }

  /** The connection failed: messages in flight go back among those waiting, to be sent again. */
  requeueInflight(): void {
    if (this.inflight.size === 0) return;
    const back = [...this.inflight.values()];
    this.inflight.clear();
    this.putBack(back);
  }

  /**
   * Messages taken earlier go back among those waiting, each in its place by sequence number (`waiting`
   * stays in that order), so a session's messages go out again in the order they came, whichever of them
   * failed first (QoS 0 writes and QoS 1 messages in flight fail separately).
   */
  private putBack(back: QueuedMessage[]): void {
    this.waiting = [...back, ...this.waiting.slice(this.head)].sort((a, b) => a.seq - b.seq);
    this.head = 0;
  }

  /** Is a QoS 1 message still held (not evicted)? */
  holds(m: QueuedMessage): boolean {
    return this.inflight.has(m.seq);
  }

  private expired(m: QueuedMessage): boolean {
    return this.limits.maxTtlMs > 0 && this.now() - m.enqueuedAt > this.limits.maxTtlMs;
  }

  /** Frees room held by expired messages at the front before a policy decides anything. */
  private expireOld(): void {
    if (this.limits.maxTtlMs === 0) return;
    for (const [seq, m] of this.inflight) {
      if (!this.expired(m)) break;
      this.inflight.delete(seq);
      this.release(m, "expired");
    }
    for (let m = this.waiting[this.head]; m && this.expired(m); m = this.waiting[this.head]) {
      this.waiting[this.head++] = undefined as unknown as QueuedMessage;
      this.release(m, "expired");
    }
    this.compact();
  }

  /** Drops the oldest message in flight or waiting; false when there is none. */
  private evictOldest(): boolean {
    const first = this.inflight.values().next();
    if (!first.done) {
      this.inflight.delete(first.value.seq);
      this.release(first.value, "overflow");
      return true;
    }
    const m = this.waiting[this.head];
    if (!m) return false;
    this.waiting[this.head++] = undefined as unknown as QueuedMessage;
    this.release(m, "overflow");
    this.compact();
    return true;
  }

  private release(m: QueuedMessage, dropped?: "overflow" | "expired" | "refused" | "storage"): void {
    this.store.remove(m.seq);
    this.bytes -= m.payload.length;
    this.events.depth(-1, -m.payload.length);
    if (dropped) this.events.dropped(dropped);
  }

  private compact(): void {
    if (this.head > 1024 && this.head * 2 > this.waiting.length) {
      this.waiting = this.waiting.slice(this.head);
      this.head = 0;
    }
  }
}
