import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import type { Packet } from "mqtt-packet";
import { encode } from "../../proxy/mqtt/codec.ts";
import { MalformedPacket } from "../../proxy/mqtt/framer.ts";
import { PacketReader } from "../../proxy/mqtt/reader.ts";

const connect = encode({ cmd: "connect", clientId: "r", protocolVersion: 5 } as Packet, 5);
const publish = (i: number) =>
  encode(
    {
      cmd: "publish",
      topic: `t/${i}`,
      payload: Buffer.alloc(i * 7, i),
      qos: 1,
      messageId: i + 1,
      retain: false,
      dup: false,
      properties: { userProperties: { n: String(i) } },
    } as Packet,
    5,
  );

function read(chunks: Buffer[], maxBytes = 1 << 20) {
  const got: { cmd: string; raw: Buffer; id?: number }[] = [];
  const reader = new PacketReader(maxBytes, (p, raw) =>
    got.push({ cmd: p.cmd, raw: Buffer.from(raw), id: (p as { messageId?: number }).messageId }),
  );
  for (const c of chunks) reader.push(c);
  return got;
}

describe("MQTT packet reader", () => {
  test("every packet comes with the bytes it arrived as, however the stream is cut", () => {
    const packets = [connect, ...Array.from({ length: 6 }, (_, i) => publish(i))];
    const stream = Buffer.concat(packets);
    fc.assert(
      fc.property(fc.array(fc.nat(stream.length), { maxLength: 12 }), (at) => {
        const points = [...new Set(at)].sort((a, b) => a - b);
        const chunks = [...points, stream.length].map((p, i) => stream.subarray(points[i - 1] ?? 0, p));
        const got = read(chunks);
        expect(got.map((g) => g.raw)).toEqual(packets);
        expect(got.map((g) => g.id)).toEqual([undefined, 1, 2, 3, 4, 5, 6]);
      }),
      { numRuns: 200 },
    );
  });

  test("what the parser refuses, and a packet over the limit, are MalformedPacket", () => {
    // Reserved flags set on a PUBACK (its fixed header must be 0x40).
    expect(() => read([connect, Buffer.from([0x41, 0x02, 0x00, 0x01])])).toThrow(MalformedPacket);
    // A protocol name mqtt-packet does not know.
    const bad = Buffer.from(connect);
    bad[4] = "X".charCodeAt(0);
    expect(() => read([bad])).toThrow(MalformedPacket);
    expect(() => read([connect, publish(9)], 40)).toThrow(/exceeds the 40 byte limit/);
  });

  test("a packet's fields stay inside its own bytes, even with another packet after it in the same read", () => {
    // A QoS 1 PUBLISH too short for its packet identifier, then a PINGREQ: mqtt-packet reads no identifier
    // (-1; the buffer refuses it), not one made of the PINGREQ's bytes.
    const noId = Buffer.from([0x32, 0x03, 0x00, 0x01, 0x61, 0xc0, 0x00]);
    expect(read([connect, noId]).map((g) => [g.cmd, g.id])).toEqual([
      ["connect", undefined],
      ["publish", -1],
      ["pingreq", undefined],
    ]);
    // An MQTT 5 PUBLISH whose property length runs past its end, then a PUBREL.
    const overrun = Buffer.from([0x32, 0x06, 0x00, 0x01, 0x61, 0x00, 0x01, 0x02, 0x62, 0x02, 0x00, 0x01]);
    expect(() => read([connect, overrun])).toThrow(MalformedPacket);
  });

  test("the packets before a malformed one in the same read are handed on first", () => {
    const got: string[] = [];
    const reader = new PacketReader(1 << 20, (p) => got.push(p.cmd));
    const garbage = Buffer.from([0x30, 0xff, 0xff, 0xff, 0xff, 0x01]); // five length bytes
    expect(() => reader.push(Buffer.concat([connect, publish(1), garbage]))).toThrow(
      /longer than four bytes/,
    );
    expect(got).toEqual(["connect", "publish"]);
  });

  test("a failure in the packet handler reaches the caller, who ends the connection", () => {
    const reader = new PacketReader(1 << 20, (p) => {
      if (p.cmd === "publish") throw new Error("handler failed");
    });
    expect(() => reader.push(Buffer.concat([connect, publish(1)]))).toThrow("handler failed");
  });
});
