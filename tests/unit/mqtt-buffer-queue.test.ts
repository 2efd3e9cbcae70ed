import { describe, expect, test } from "bun:test";
import type { BufferEvents, DropReason } from "../../proxy/mqtt/buffer/events.ts";
import { MessageQueue } from "../../proxy/mqtt/buffer/queue.ts";
import { MemoryStore } from "../../proxy/mqtt/buffer/store.ts";

function recorder() {
  const r = { messages: 0, bytes: 0, dropped: [] as DropReason[], delivered: 0 };
  const events: BufferEvents = {
    depth: (m, b) => {
      r.messages += m;
      r.bytes += b;
    },
    dropped: (reason) => r.dropped.push(reason),
    delivered: () => r.delivered++,
    connect: () => {},
    stored: () => {},
    replayed: () => {},
    storageFailed: () => {},
  };
  return { r, events };
}

/** One client's credentials, shared by its messages. */
const creds = { username: "meter" };
const msg = (text: string, qos: 0 | 1 = 1) => ({
  topic: "t",
  payload: Buffer.from(text),
  qos,
  retain: false,
  creds,
});
const wire = { packet: Buffer.alloc(0), version: 4 as const };
const kept = () => {};
const limits = { maxBytes: 10, maxMessages: 0, maxTtlMs: 0, overflow: "reject" as const };
const drain = (q: MessageQueue) => {
  const out: string[] = [];
  for (let m = q.take(); m; m = q.take()) out.push(m.payload.toString());
  return out;
};

describe("MQTT publish buffer queue", () => {
  test("reject: a message that does not fit is refused and nothing queued is lost", () => {
    const { r, events } = recorder();
    const q = new MessageQueue("c", limits, events, new MemoryStore());
    expect(q.offer(msg("12345"), wire, kept)).toBe("queued");
    expect(q.offer(msg("67890"), wire, kept)).toBe("queued");
    expect(q.offer(msg("x"), wire, kept)).toBe("rejected");
    expect(drain(q)).toEqual(["12345", "67890"]);
    expect(r).toMatchObject({ messages: 2, bytes: 10, dropped: ["rejected"] });
  });

  test("drop-oldest evicts from the front, in flight included; an oversized message still fails", () => {
    const { r, events } = recorder();
    const q = new MessageQueue("c", { ...limits, overflow: "drop-oldest" }, events, new MemoryStore());
    q.offer(msg("aaaa"), wire, kept);
    q.offer(msg("bbbb"), wire, kept);
    const sent = q.take();
    expect(sent?.payload.toString()).toBe("aaaa");
    expect(q.offer(msg("cccc"), wire, kept)).toBe("queued");
    expect(q.holds(sent as never)).toBe(false);
    expect(q.offer(msg("x".repeat(11)), wire, kept)).toBe("oversized");
    expect(drain(q)).toEqual(["bbbb", "cccc"]);
    q.delivered(sent as never); // the evicted message's late PUBACK changes nothing
    expect(r).toMatchObject({ messages: 2, bytes: 8, dropped: ["overflow", "oversized"], delivered: 0 });
  });

  test("drop-newest discards the new message; max-messages limits the count", () => {
    const { r, events } = recorder();
    const q = new MessageQueue(
      "c",
      { ...limits, maxMessages: 2, overflow: "drop-newest" },
      events,
      new MemoryStore(),
    );
    expect([
      q.offer(msg("1"), wire, kept),
      q.offer(msg("2"), wire, kept),
      q.offer(msg("3"), wire, kept),
    ]).toEqual(["queued", "queued", "dropped"]);
    expect(drain(q)).toEqual(["1", "2"]);
    expect(r.dropped).toEqual(["overflow"]);
  });

  test("max-ttl: an expired message is dropped before it is sent, and frees room for a new one", () => {
    let now = 0;
    const { r, events } = recorder();
    const q = new MessageQueue(
      "c",
      { ...limits, maxBytes: 12, maxTtlMs: 1000 },
      events,
      new MemoryStore(),
      () => now,
    );
    q.offer(msg("old1"), wire, kept);
    q.offer(msg("old2"), wire, kept);
    now = 600;
    q.offer(msg("new"), wire, kept);
    now = 1500;
    expect(q.offer(msg("room"), wire, kept)).toBe("queued"); // old1 and old2 expired to make room
    now = 2001;
    expect(drain(q)).toEqual(["room"]); // "new" is past its TTL when its turn comes
    expect(r.dropped).toEqual(["expired", "expired", "expired"]);
    expect(r).toMatchObject({ messages: 1, bytes: 4 }); // "room", in flight
  });

  test("after a failed connection, messages in flight are sent again first, in their order", () => {
    const { r, events } = recorder();
    const q = new MessageQueue("c", { ...limits, maxBytes: 100 }, events, new MemoryStore());
    for (const t of ["1", "2", "3", "4"]) q.offer(msg(t), wire, kept);
    const [one, two] = [q.take(), q.take()];
    q.delivered(one as never);
    expect(q.inFlight).toBe(1);
    q.requeueInflight();
    expect(drain(q)).toEqual(["2", "3", "4"]);
    expect(two?.payload.toString()).toBe("2");
    expect(r).toMatchObject({ delivered: 1, messages: 3 });
  });

  test("a QoS 0 message being written is still held; a failed write puts it back in front", () => {
    const { events } = recorder();
    const q = new MessageQueue("c", { ...limits, maxBytes: 100 }, events, new MemoryStore());
    for (const t of ["a", "b"]) q.offer(msg(t, 0), wire, kept);
    const a = q.take();
    expect(q.messages).toBe(2); // the session cannot end while "a" is being written
    q.unsent([a as never]);
    expect(drain(q)).toEqual(["a", "b"]);
    expect(q.messages).toBe(2);
    q.delivered(a as never);
    expect(q.messages).toBe(1);
  });

  test("drop-oldest with only messages being written: the new message is held over the limit (no endless eviction)", () => {
    const { r, events } = recorder();
    const q = new MessageQueue(
      "c",
      { ...limits, maxBytes: 100, maxMessages: 2, overflow: "drop-oldest" },
      events,
      new MemoryStore(),
    );
    for (const t of ["a", "b"]) q.offer(msg(t, 0), wire, kept);
    const written = [q.take(), q.take()];
    expect(q.offer(msg("c", 0), wire, kept)).toBe("queued");
    expect([q.messages, r.dropped]).toEqual([3, []]);
    for (const m of written) q.delivered(m as never);
    expect(drain(q)).toEqual(["c"]);
  });

  test("QoS 0 and QoS 1 messages that failed go out again in their order, whichever failed first", () => {
    for (const unsentFirst of [true, false]) {
      const { events } = recorder();
      const q = new MessageQueue("c", { ...limits, maxBytes: 100 }, events, new MemoryStore());
      for (const [t, qos] of [
        ["a", 1],
        ["b", 0],
        ["c", 1],
        ["d", 0],
        ["e", 1],
      ] as const)
        q.offer(msg(t, qos), wire, kept);
      const taken = [q.take(), q.take(), q.take(), q.take()] as never[]; // a, b, c, d; e still waiting
      const written0 = [taken[1], taken[3]] as never[];
      if (unsentFirst) {
        q.unsent(written0);
        q.requeueInflight();
      } else {
        q.requeueInflight();
        q.unsent(written0);
      }
      expect(drain(q)).toEqual(["a", "b", "c", "d", "e"]);
    }
  });

  test("a QoS 1 message sent at QoS 0 leaves once written, and a failed write puts it back in front", () => {
    const { r, events } = recorder();
    const q = new MessageQueue("c", { ...limits, maxBytes: 100 }, events, new MemoryStore());
    q.offer({ ...msg("a"), wire: { ...wire, idAt: 3 } }, wire, kept);
    q.offer(msg("b"), wire, kept);
    const a = q.take();
    if (!a) throw new Error("nothing taken");
    q.downgrade(a);
    expect([a.qos, a.wire, q.inFlight, q.messages]).toEqual([0, undefined, 0, 2]);
    q.unsent([a]);
    expect(drain(q)).toEqual(["a", "b"]);
    q.delivered(a);
    expect([q.inFlight, q.messages, r.delivered]).toEqual([1, 1, 1]);
  });
});
