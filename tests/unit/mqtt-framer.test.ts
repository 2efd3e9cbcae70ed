import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import type { Packet } from "mqtt-packet";
import { encode, PacketDecoder } from "../../proxy/mqtt/codec.ts";
import { MalformedPacket, MqttFramer } from "../../proxy/mqtt/framer.ts";

function encodePacket(type: number, body: Uint8Array): Buffer {
  const len: number[] = [];
  let n = body.length;
  do {
    let b = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) b |= 0x80;
    len.push(b);
  } while (n > 0);
  return Buffer.concat([Buffer.from([type << 4, ...len]), body]);
}

function run(chunks: Buffer[], whole: (t: number) => boolean) {
  const out: Buffer[] = [];
  const packets: Buffer[] = [];
  const framer = new MqttFramer({
    whole,
    packet: (raw) => {
      packets.push(raw);
      out.push(raw);
    },
    bytes: (b) => out.push(Buffer.from(b)),
  });
  for (const c of chunks) framer.push(c);
  return { out: Buffer.concat(out), packets };
}

/** Cuts `data` at the given points (any order, duplicates allowed). */
const cut = (data: Buffer, at: number[]) => {
  const points = [...new Set(at.map((p) => p % (data.length + 1)))].sort((a, b) => a - b);
  const chunks: Buffer[] = [];
  let from = 0;
  for (const p of [...points, data.length]) {
    chunks.push(data.subarray(from, p));
    from = p;
  }
  return chunks.filter((c) => c.length > 0);
};

describe("MQTT framer", () => {
  test("however the stream is cut, every byte comes out once, in order, and whole packets come out complete", () => {
    const packet = fc
      .tuple(fc.integer({ min: 1, max: 15 }), fc.uint8Array({ maxLength: 400 }))
      .map(([t, body]) => ({ type: t, raw: encodePacket(t, body) }));
    fc.assert(
      fc.property(
        fc.array(packet, { maxLength: 20 }),
        fc.array(fc.nat(), { maxLength: 30 }),
        fc.integer({ min: 0, max: 0xffff }),
        (packets, at, mask) => {
          const data = Buffer.concat(packets.map((p) => p.raw));
          const whole = (t: number) => ((mask >> t) & 1) === 1;
          const r = run(cut(data, at), whole);
          expect(r.out.equals(data)).toBe(true);
          expect(r.packets.map((p) => p.toString("hex"))).toEqual(
            packets.filter((p) => whole(p.type)).map((p) => p.raw.toString("hex")),
          );
        },
      ),
      { numRuns: 500 },
    );
  });

  test("a packet of type 0 and a five-byte remaining length are malformed, and the framer stays failed", () => {
    const framer = new MqttFramer({ whole: () => true, packet: () => {}, bytes: () => {} });
    expect(() => framer.push(Buffer.from([0x00, 0x00]))).toThrow(
      new MalformedPacket("packet type 0 is reserved"),
    );
    expect(() => framer.push(Buffer.from([0xc0, 0x00]))).toThrow(MalformedPacket);
    const long = new MqttFramer({ whole: () => false, packet: () => {}, bytes: () => {} });
    expect(() => long.push(Buffer.from([0x30, 0xff, 0xff, 0xff, 0xff, 0x01]))).toThrow(
      "remaining length is longer than four bytes",
    );
  });

  test("a whole packet larger than the limit is refused before it is collected", () => {
    const framer = new MqttFramer({
      whole: () => true,
      packet: () => {},
      bytes: () => {},
      maxWholeBytes: 100,
    });
    expect(() => framer.push(encodePacket(3, new Uint8Array(200)).subarray(0, 10))).toThrow(
      "packet of 203 bytes exceeds the 100 byte limit",
    );
  });
});

describe("MQTT codec", () => {
  test("a packet whose user properties end up empty is still written (mqtt-packet would write nothing)", () => {
    const packet = {
      cmd: "connect",
      clientId: "c1",
      protocolVersion: 5,
      protocolId: "MQTT",
      clean: true,
      keepalive: 0,
      properties: { userProperties: {} },
    } as unknown as Packet;
    const raw = encode(packet, 5);
    expect(raw.length).toBeGreaterThan(0);
    const back = new PacketDecoder().decode(raw) as { clientId: string; properties?: object };
    expect(back.clientId).toBe("c1");
    expect(back.properties).toBeUndefined();
  });
});
