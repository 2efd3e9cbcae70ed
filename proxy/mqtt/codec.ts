/**
 * MQTT 3.1.1 and 5 packets through mqtt-packet, for the packets the proxy must understand. One decoder per
 * direction of a connection: it learns the protocol version from CONNECT (or is told it). A decode failure
 * is MalformedPacket with mqtt-packet's reason.
 */
import mqtt, { type Packet, type UserProperties } from "mqtt-packet";
import { MalformedPacket } from "./framer.ts";

export type MqttVersion = 3 | 4 | 5;

export class PacketDecoder {
  private parser: ReturnType<typeof mqtt.parser>;
  private decoded: Packet | undefined;
  private error: { message: string } | undefined;

  constructor(version?: MqttVersion) {
    this.parser = mqtt.parser(version ? { protocolVersion: version } : {});
    this.parser.on("packet", (p) => {
      this.decoded = p;
    });
    this.parser.on("error", (e: Error) => {
      this.error ??= e;
    });
  }

  /** Decodes one whole packet (as the framer collects them). */
  decode(raw: Buffer): Packet {
    this.decoded = undefined;
    this.error = undefined;
    this.parser.parse(raw);
    const error = this.error as { message: string } | undefined;
    if (error || !this.decoded) throw new MalformedPacket(error?.message ?? "incomplete packet");
    return this.decoded;
  }
}

/**
 * mqtt-packet writes nothing at all for a packet whose `userProperties` is an empty object, so an empty
 * one is left out; and a packet it still cannot write is an error, never an empty write.
 */
export function encode(packet: Packet, version: MqttVersion): Buffer {
  const out = mqtt.generate(writable(packet), { protocolVersion: version });
  if (out.length === 0) throw new Error(`cannot encode the ${packet.cmd} packet`);
  return out;
}

function writable(packet: Packet): Packet {
  const props = (packet as { properties?: { userProperties?: object } }).properties;
  if (!props?.userProperties || Object.keys(props.userProperties).length > 0) return packet;
  const { userProperties: _, ...rest } = props;
  return { ...packet, properties: rest } as Packet;
}

/**
 * Packets to be sent together, as one buffer: mqtt-packet writes each one's pieces straight into the
 * batch (no buffer per packet), and `take` joins them. A packet it cannot write is an error, as in encode.
 */
export class PacketBatch {
  private parts: Buffer[] = [];
  private failure: Error | undefined;
  private readonly sink = {
    // mqtt-packet writes strings (topics, reason strings) as they are, and buffers.
    write: (b: Buffer | string) => this.parts.push(typeof b === "string" ? Buffer.from(b) : b) > 0,
    destroy: (e: Error) => {
      this.failure = e;
    },
  };

  get empty(): boolean {
    return this.parts.length === 0;
  }

  add(packet: Packet, version: MqttVersion): void {
    const mark = this.parts.length;
    this.failure = undefined;
    mqtt.writeToStream(writable(packet), this.sink as never, { protocolVersion: version });
    // Set by mqtt-packet through the sink while it wrote (TypeScript cannot see that).
    const failure = this.failure as Error | undefined;
    if (failure || this.parts.length === mark) {
      this.parts.length = mark;
      throw new Error(`cannot encode the ${packet.cmd} packet${failure ? `: ${failure.message}` : ""}`);
    }
  }

  /** The packets added since the last take, in one new buffer (pieces may be mqtt-packet's shared ones). */
  take(): Buffer {
    const b = Buffer.concat(this.parts);
    this.parts = [];
    return b;
  }
}

/** The first value of a user property, if present. */
export function userProperty(props: { userProperties?: UserProperties } | undefined, name: string) {
  const v = props?.userProperties?.[name];
  return Array.isArray(v) ? v[0] : v;
}

/** MQTT 5 reason codes the proxy sends. */
export const Reason = {
  success: 0x00,
  unspecified: 0x80,
  malformed: 0x81,
  protocolError: 0x82,
  implementationSpecific: 0x83,
  topicNameInvalid: 0x90,
  topicAliasInvalid: 0x94,
  qosNotSupported: 0x9b,
  quotaExceeded: 0x97,
  /** MQTT 3.1.1 SUBACK failure return code. */
  subackFailure311: 0x80,
} as const;
