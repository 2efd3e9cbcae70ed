import type { Packet } from "mqtt-packet";
import { type MqttVersion, PacketDecoder } from "./codec.ts";
import { MqttFramer } from "./framer.ts";

/**
 * Every packet of one connection's byte stream, decoded, with the bytes it arrived as: the framer
 * (framer.ts) delimits each packet and enforces the size limit, and mqtt-packet decodes each packet on its
 * own (it learns the protocol version from CONNECT). Decoding packet by packet keeps each one's fields
 * inside its own bytes: mqtt-packet bounds a field by what it has been given, not by the packet's length,
 * so a stream fed whole would let a short packet read into the next. A packet either refuses is
 * MalformedPacket; the packets before it in the same read are handed on first.
 */
export class PacketReader {
  private readonly framer: MqttFramer;
  private readonly decoder: PacketDecoder;

  /** `version` when the stream has no CONNECT to learn it from. */
  constructor(maxBytes: number, onPacket: (p: Packet, raw: Buffer) => void, version?: MqttVersion) {
    this.decoder = new PacketDecoder(version);
    this.framer = new MqttFramer({
      whole: () => true,
      maxWholeBytes: maxBytes,
      packet: (raw) => onPacket(this.decoder.decode(raw), raw),
      bytes: () => {},
    });
  }

  /** Reads one chunk; `onPacket` is called for each packet it completes, in order. */
  push(chunk: Buffer): void {
    this.framer.push(chunk);
  }
}
