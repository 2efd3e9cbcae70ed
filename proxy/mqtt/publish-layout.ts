/**
 * Where the topic name and the packet identifier of a PUBLISH lie in its bytes (MQTT 3.1, 3.1.1 and 5
 * alike): after the fixed header come the topic's two-byte length and the topic, then, at QoS 1 and 2,
 * the two-byte identifier. Only for a packet the framer delimited and mqtt-packet decoded: the lengths
 * read here are checked against the packet's size, and a layout that does not fit is undefined.
 */
export interface PublishLayout {
  topicStart: number;
  topicEnd: number;
  /** Where the packet identifier is (the first byte after the topic). */
  idAt: number;
}

export function publishLayout(publish: Buffer): PublishLayout | undefined {
  let at = 1;
  while (at < 5 && ((publish[at] as number) & 0x80) !== 0) at++;
  at++;
  if (at + 2 > publish.length) return undefined;
  const topicStart = at + 2;
  const topicEnd = topicStart + publish.readUInt16BE(at);
  return topicEnd > publish.length ? undefined : { topicStart, topicEnd, idAt: topicEnd };
}
