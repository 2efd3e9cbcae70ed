import { describe, expect, test } from "bun:test";
import type { Packet } from "mqtt-packet";
import { encode, PacketBatch } from "../../proxy/mqtt/codec.ts";

describe("MQTT packet batch", () => {
  test("packets added together come out as one buffer, each as encode writes it", () => {
    const batch = new PacketBatch();
    const packets: Packet[] = [
      { cmd: "connack", sessionPresent: false, reasonCode: 0, properties: { maximumQoS: 1 } },
      ...[1, 2, 255, 256, 65_535].map((messageId) => ({ cmd: "puback" as const, messageId })),
      { cmd: "puback", messageId: 3, reasonCode: 0x97, properties: { reasonString: "buffer full: ü" } },
      { cmd: "suback", messageId: 4, granted: [0x83], properties: { reasonString: "publishing only" } },
      { cmd: "disconnect", reasonCode: 0x90, properties: { reasonString: 'topic "a/+"' } },
      { cmd: "pingresp" },
    ];
    for (const p of packets) batch.add(p, 5);
    expect(batch.take()).toEqual(Buffer.concat(packets.map((p) => encode(p, 5))));
    expect(batch.empty).toBe(true);
  });

  test("a packet mqtt-packet cannot write is an error, and what was added before it stays", () => {
    const batch = new PacketBatch();
    batch.add({ cmd: "puback", messageId: 1 }, 4);
    expect(() => batch.add({ cmd: "nonsense" } as unknown as Packet, 4)).toThrow(
      /cannot encode the nonsense packet/,
    );
    expect(batch.take()).toEqual(encode({ cmd: "puback", messageId: 1 }, 4));
  });
});
