import { describe, expect, test } from "bun:test";
import mqttPacket from "mqtt-packet";
import { publishLayout, publishPropertyIds } from "../../proxy/mqtt/publish-layout.ts";

/**
 * A PUBLISH's property identifiers read from its bytes (publish-layout.ts publishPropertyIds), held to
 * what mqtt-packet writes: every property the generator writes is found, in order, and a repeat that
 * mqtt-packet's own decoding hides (a first value of 0) is seen.
 */
const ids = (packet: Buffer, qos: number) => {
  const layout = publishLayout(packet);
  if (!layout) throw new Error("no layout");
  return publishPropertyIds(packet, layout, qos);
};

describe("the property identifiers of a PUBLISH", () => {
  test("each type of value a PUBLISH property has, at QoS 0 and 1, as mqtt-packet writes them", () => {
    for (const qos of [0, 1] as const) {
      const packet = mqttPacket.generate(
        {
          cmd: "publish",
          topic: "a/b",
          payload: "x",
          qos,
          ...(qos ? { messageId: 9 } : {}),
          dup: false,
          retain: false,
          properties: {
            payloadFormatIndicator: true,
            messageExpiryInterval: 60,
            responseTopic: "r/t",
            correlationData: Buffer.from([1, 2, 3]),
            userProperties: { k: ["v1", "v2"], other: "w" },
            contentType: "text/plain",
          },
        },
        { protocolVersion: 5 },
      );
      expect(ids(packet, qos)).toEqual([0x01, 0x02, 0x08, 0x09, 0x26, 0x26, 0x26, 0x03]);
    }
  });

  test("a repeat mqtt-packet's decoding hides is seen; a section that does not read as properties is undefined", () => {
    // Topic "a", packet identifier 7, the property bytes, payload "x".
    const publish = (...props: number[]) =>
      Buffer.from([0x32, 7 + props.length, 0x00, 0x01, 0x61, 0x00, 0x07, props.length, ...props, 0x78]);
    expect(ids(publish(0x01, 0, 0x01, 0), 1)).toEqual([0x01, 0x01]);
    expect(ids(publish(0x02, 0, 0, 0, 0, 0x02, 0, 0, 0, 1), 1)).toEqual([0x02, 0x02]);
    expect(ids(publish(0x0b, 0x85, 0x01), 1)).toEqual([0x0b]);
    expect(ids(publish(), 1)).toEqual([]);
    expect(ids(publish(0x7f, 1), 1)).toBeUndefined();
    // A string whose length runs past the section, and past the packet.
    expect(ids(publish(0x03, 0, 9, 0x61), 1)).toBeUndefined();
    expect(ids(publish(0x03, 0xff, 0xff), 1)).toBeUndefined();
  });
});
