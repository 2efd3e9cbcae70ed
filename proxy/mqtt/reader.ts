import mqtt, { type Packet } from "mqtt-packet";
import { MalformedPacket, MqttFramer } from "./framer.ts";

/**
 * Every packet of one connection's byte stream, decoded, with the bytes it arrived as: the framer
 * (framer.ts) delimits each packet and enforces the size limit, and one mqtt-packet parser reads the
 * stream as it comes (one append per read, not per packet), learning the protocol version from CONNECT.
 * A packet either of them refuses is MalformedPacket, and so is any disagreement between them.
 */
export class PacketReader {
  private readonly framer: MqttFramer;
  private readonly parser = mqtt.parser();
  /** Packets the framer delimited in this read, and how many of them the parser has decoded. */
  private raws: Buffer[] = [];
  private decoded = 0;
  private error: Error | undefined;
  /** Why the framer stopped in this read: packets before that point are still handed on. */
  private framing: unknown;

  constructor(maxBytes: number, onPacket: (p: Packet, raw: Buffer) => void) {
    this.framer = new MqttFramer({
      whole: () => true,
      maxWholeBytes: maxBytes,
      packet: (raw) => this.raws.push(raw),
      bytes: () => {},
    });
    this.parser.on("packet", (p: Packet) => {
      const raw = this.raws[this.decoded++];
      if (!raw) throw this.framing ?? new MalformedPacket("a packet that could not be delimited");
      onPacket(p, raw);
    });
    this.parser.on("error", (e: Error) => {
      this.error ??= e;
    });
  }

  /**
   * Reads one chunk; `onPacket` is called for each packet it completes, in order, up to the first
   * malformed one.
   */
  push(chunk: Buffer): void {
    try {
      this.framer.push(chunk);
    } catch (e) {
      this.framing = e;
    }
    try {
      this.parser.parse(chunk);
      if (this.framing) throw this.framing;
      if (this.error) throw new MalformedPacket(this.error.message);
      if (this.decoded !== this.raws.length) throw new MalformedPacket("a packet that could not be decoded");
    } finally {
      this.raws = [];
      this.decoded = 0;
    }
  }
}
