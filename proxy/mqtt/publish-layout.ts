/**
 * Where the topic name and the packet identifier of a PUBLISH lie in its bytes (MQTT 3.1, 3.1.1 and 5
 * alike): after the fixed header come the topic's two-byte length and the topic, then, at QoS 1 and 2,
 * the two-byte identifier. Only for a packet the framer delimited and mqtt-packet decoded: the lengths
 * read here are checked against the packet's size, and a layout that does not fit is undefined.
 */
import mqttConstants from "mqtt-packet/constants.js";

export interface PublishLayout {
  topicStart: number;
  topicEnd: number;
  /** Where the packet identifier is (the first byte after the topic). */
  idAt: number;
}

export function publishLayout(publish: Buffer): PublishLayout | undefined {
  const [, at] = varInt(publish, 1); // the remaining length
  if (at + 2 > publish.length) return undefined;
  const topicStart = at + 2;
  const topicEnd = topicStart + publish.readUInt16BE(at);
  return topicEnd > publish.length ? undefined : { topicStart, topicEnd, idAt: topicEnd };
}

/** A variable byte integer at `at`: its value and where the next field starts. */
function varInt(b: Buffer, at: number): [number, number] {
  let value = 0;
  for (let i = 0, mul = 1; i < 4; i++, mul *= 128) {
    const byte = b[at + i] as number;
    value += (byte & 0x7f) * mul;
    if (!(byte & 0x80)) return [value, at + i + 1];
  }
  return [value, at + 4];
}

/** Octets a property's value takes, by mqtt-packet's type of it, at `at`. */
const VALUE_SIZE: Record<string, (b: Buffer, at: number) => number> = {
  byte: () => 1,
  int8: () => 1,
  int16: () => 2,
  int32: () => 4,
  var: (b, at) => varInt(b, at)[1] - at,
  string: (b, at) => 2 + b.readUInt16BE(at),
  binary: (b, at) => 2 + b.readUInt16BE(at),
  pair: (b, at) => {
    const first = 2 + b.readUInt16BE(at);
    return first + 2 + b.readUInt16BE(at + first);
  },
};

/**
 * The identifiers of an MQTT 5 PUBLISH's properties, in the order they came, each value stepped over by
 * the type mqtt-packet gives its identifier. mqtt-packet's decoding keeps only the last of a repeated
 * property whose first value is false or zero, so a repeat is found here. Only for a packet mqtt-packet
 * decoded, with `layout` from publishLayout; undefined when the section does not read as properties (an
 * unknown identifier, a value that runs past the section).
 */
export function publishPropertyIds(
  publish: Buffer,
  layout: PublishLayout,
  qos: number,
): number[] | undefined {
  const [length, from] = varInt(publish, layout.idAt + (qos > 0 ? 2 : 0));
  const end = from + length;
  const ids: number[] = [];
  for (let at = from; at < end; ) {
    const id = publish[at] as number;
    const size = VALUE_SIZE[mqttConstants.propertiesTypes[mqttConstants.propertiesCodes[id] ?? ""] ?? ""];
    if (!size || at + 1 >= end) return undefined;
    let next: number;
    try {
      next = at + 1 + size(publish, at + 1);
    } catch {
      return undefined; // a length that reads past the packet
    }
    if (next > end) return undefined;
    at = next;
    ids.push(id);
  }
  return ids;
}
