/**
 * A PUBLISH as the publish buffer's queue holds it, from a client's packet or from the store.
 */
import type { IPublishPacket } from "mqtt-packet";
import type { MqttVersion } from "../codec.ts";
import type { PublishLayout } from "../publish-layout.ts";
import type { Credentials } from "./credentials.ts";
import type { QueuedMessage } from "./queue.ts";

/**
 * A PUBLISH as the queue holds it: the properties passed on, without those of this hop. The packet as
 * received (`raw`, in protocol `version`) is kept to be sent on as it is, unless it carries such a
 * property or has no room for the packet identifier its QoS needs (a file of an older build may hold one).
 */
export function publishFields(
  p: IPublishPacket,
  raw: Buffer,
  version: MqttVersion,
  layout: PublishLayout | undefined,
  creds: Credentials,
): Omit<QueuedMessage, "seq" | "enqueuedAt" | "sent" | "kept"> {
  const payload = Buffer.isBuffer(p.payload) ? p.payload : Buffer.from(p.payload);
  const { topicAlias, subscriptionIdentifier, ...properties } = p.properties ?? {};
  return {
    topic: p.topic,
    payload,
    qos: p.qos === 1 ? 1 : 0,
    retain: p.retain,
    creds,
    ...(p.properties ? { properties } : {}),
    ...(layout &&
    (p.qos === 0 || layout.idAt + 2 <= raw.length) &&
    topicAlias === undefined &&
    subscriptionIdentifier === undefined &&
    !replaced(p.properties)
      ? { wire: { packet: raw, version, idAt: layout.idAt } }
      : {}),
  };
}

/**
 * Does a string property hold a replacement character, as mqtt-packet reads bytes that are not UTF-8? Such
 * a PUBLISH is written anew (with the replacement characters, which every broker takes) rather than passed
 * on as received (which a strict broker refuses).
 */
function replaced(props: IPublishPacket["properties"]): boolean {
  if (!props) return false;
  const has = (s: unknown) => typeof s === "string" && s.includes("\uFFFD");
  if (has(props.contentType) || has(props.responseTopic)) return true;
  for (const [k, v] of Object.entries(props.userProperties ?? {}))
    if (has(k) || (Array.isArray(v) ? v.some(has) : has(v))) return true;
  return false;
}
