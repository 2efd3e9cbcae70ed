/**
 * Splits an MQTT byte stream into packets without copying the ones nobody needs to read. Each packet's
 * fixed header (type, flags, remaining length) is checked; packets of the types `whole` selects are
 * collected and handed to `packet` complete, every other byte is handed to `bytes` as it arrives, in
 * stream order. Malformed framing throws MalformedPacket: the stream cannot be resynchronised after it.
 */
export class MalformedPacket extends Error {}

/** MQTT control packet types (fixed header, high nibble). */
export const PacketType = {
  CONNECT: 1,
  CONNACK: 2,
  PUBLISH: 3,
  PUBACK: 4,
  PUBREC: 5,
  PUBREL: 6,
  PUBCOMP: 7,
  SUBSCRIBE: 8,
  SUBACK: 9,
  UNSUBSCRIBE: 10,
  UNSUBACK: 11,
  PINGREQ: 12,
  PINGRESP: 13,
  DISCONNECT: 14,
  AUTH: 15,
} as const;

/** The largest remaining length MQTT can express (four length bytes). */
const MAX_REMAINING = 268_435_455;

export interface FramerOptions {
  whole(type: number): boolean;
  packet(raw: Buffer): void;
  bytes(chunk: Buffer): void;
  /** Largest packet collected whole, in bytes (a pass-through packet of any size streams). */
  maxWholeBytes?: number;
}

export class MqttFramer {
  /** Fixed-header bytes of the packet being read; empty between packets. */
  private header: number[] = [];
  /** Body bytes still to come for the current packet. */
  private remaining = 0;
  private mode: "header" | "pass" | "collect" = "header";
  private parts: Buffer[] = [];
  private failed: MalformedPacket | undefined;

  constructor(private readonly o: FramerOptions) {}

  push(chunk: Buffer): void {
    if (this.failed) throw this.failed;
    try {
      this.consume(chunk);
    } catch (e) {
      if (e instanceof MalformedPacket) this.failed = e;
      throw e;
    }
  }

  private consume(chunk: Buffer): void {
    let i = 0;
    // Start of a run of pass-through bytes in this chunk, flushed before anything else is emitted.
    let passFrom = this.mode === "pass" ? 0 : -1;
    const flush = (end: number) => {
      if (passFrom >= 0 && end > passFrom) this.o.bytes(chunk.subarray(passFrom, end));
      passFrom = -1;
    };
    while (i < chunk.length) {
      if (this.mode === "header") {
        const headerStart = i;
        const carried = this.header.length;
        while (i < chunk.length) {
          const b = chunk[i++] as number;
          this.header.push(b);
          if (this.header.length === 1) {
            if (b >> 4 === 0) throw new MalformedPacket("packet type 0 is reserved");
            continue;
          }
          if ((b & 0x80) === 0) break;
          if (this.header.length === 5)
            throw new MalformedPacket("remaining length is longer than four bytes");
        }
        const first = this.header[0] as number;
        const last = this.header[this.header.length - 1] as number;
        if (this.header.length < 2 || (last & 0x80) !== 0) {
          // The header continues in the next chunk; bytes of it seen here are kept in this.header.
          flush(headerStart);
          return;
        }
        this.remaining = decodeLength(this.header);
        const type = first >> 4;
        if (this.o.whole(type)) {
          flush(headerStart);
          const size = this.header.length + this.remaining;
          if (size > (this.o.maxWholeBytes ?? MAX_REMAINING + 5))
            throw new MalformedPacket(
              `packet of ${size} bytes exceeds the ${this.o.maxWholeBytes} byte limit`,
            );
          this.parts = [Buffer.from(this.header)];
          this.mode = "collect";
        } else {
          if (carried > 0) {
            // Part of this header came in an earlier chunk: hand that part on first.
            flush(headerStart);
            this.o.bytes(Buffer.from(this.header.slice(0, carried)));
            passFrom = headerStart;
          } else if (passFrom < 0) passFrom = headerStart;
          this.mode = "pass";
        }
        this.header = [];
      }
      const n = Math.min(this.remaining, chunk.length - i);
      if (this.mode === "collect" && n > 0) this.parts.push(chunk.subarray(i, i + n));
      i += n;
      this.remaining -= n;
      if (this.remaining > 0) break;
      if (this.mode === "collect") {
        const raw = this.parts.length === 1 ? (this.parts[0] as Buffer) : Buffer.concat(this.parts);
        this.parts = [];
        this.mode = "header";
        this.o.packet(raw);
      } else this.mode = "header";
    }
    flush(i);
  }
}

function decodeLength(header: number[]): number {
  let value = 0;
  let multiplier = 1;
  for (let k = 1; k < header.length; k++) {
    value += ((header[k] as number) & 0x7f) * multiplier;
    multiplier *= 128;
  }
  return value;
}
