import type { Socket } from "bun";
import { copyOf } from "../../../lib/bytes.ts";

/**
 * Writes to one Bun socket with backpressure: what the kernel (or TLS layer) does not take now is kept
 * in order and written on `drain`. `queued` is what the socket has not taken yet; the relay pauses the
 * other side while it is above its high-water mark.
 *
 * What a message is made of is gathered first (byte ranges of received buffers, and latin1 text the relay
 * writes itself) and goes out in one write on `flush`: a range that continues the previous one of the same
 * buffer extends it, so a message passed on as received is written as the very buffer it arrived in, with
 * no copy; otherwise the pieces of a small message are copied into one new buffer (see flush for large ones).
 */
/** Bytes queued in an outbox past which the side that fills it is no longer read (every relay). */
export const HIGH_WATER = 256 * 1024;
/** A message up to this size is copied into one buffer and written once. */
const COPY_MAX = 16 * 1024;
/** A piece this small is copied octet by octet: cheaper than a call into the runtime (bench/h2-hop-cost.ts). */
const SMALL_PIECE = 64;
/** In a larger message, a range of at least this size is written as it is, not copied. */
const LARGE_PIECE = 4 * 1024;
/** Room for the octets an owner writes itself between two flushes (frame headers), at first. */
const OWN_SIZE = 1024;
/** Where the pieces of a message are gathered for its write, shared: a write leaves it free again. */
const SCRATCH = Buffer.allocUnsafeSlow(COPY_MAX);
let scratchTaken = false;

export class Outbox {
  private readonly queue: Uint8Array[] = [];
  /** Gathered pieces: a buffer and the range of it, or text (start and end unused). */
  private readonly sources: (Uint8Array | string)[] = [];
  private readonly starts: number[] = [];
  private readonly ends: number[] = [];
  private pieces = 0;
  private bytes = 0;
  queued = 0;
  /**
   * Octets the owner writes in place (reserve), reused from one flush to the next: a range of them is
   * never kept as a view, but copied. Made at the first reserve (an HTTP/1.1 connection makes none); when
   * they run out, a larger buffer replaces them (what was reserved keeps the old one).
   */
  ownBytes = new Uint8Array(0);
  private ownAt = 0;

  constructor(private readonly socket: Socket<unknown>) {}

  /** Adds a whole buffer to the next flush. */
  add(data: Uint8Array): void {
    this.addRange(data, 0, data.length);
  }

  /** Adds `src[start..end)`; the buffer must not change until it is written. */
  addRange(src: Uint8Array, start: number, end: number): void {
    if (end <= start) return;
    const last = this.pieces - 1;
    if (last >= 0 && this.sources[last] === src && this.ends[last] === start) this.ends[last] = end;
    else this.push(src, start, end);
    this.bytes += end - start;
  }

  /**
   * Adds `n` octets the owner writes itself to the next flush: it writes them into `ownBytes` (as it is
   * after this call) at the index returned.
   */
  reserve(n: number): number {
    if (this.ownAt + n > this.ownBytes.length) {
      this.ownBytes = new Uint8Array(Math.max(OWN_SIZE, this.ownBytes.length * 2, n));
      this.ownAt = 0;
    }
    const at = this.ownAt;
    this.ownAt += n;
    this.addRange(this.ownBytes, at, at + n);
    return at;
  }

  /** Adds text of one-byte characters (a head the relay writes), as latin1. */
  addText(text: string): void {
    if (text.length === 0) return;
    this.push(text, 0, text.length);
    this.bytes += text.length;
  }

  private push(src: Uint8Array | string, start: number, end: number): void {
    const i = this.pieces++;
    this.sources[i] = src;
    this.starts[i] = start;
    this.ends[i] = end;
  }

  /**
   * Writes what was added: as one write of one buffer when it is small (COPY_MAX), or is one range. Larger
   * messages are not copied whole: each large range goes out as it is, the small pieces between them
   * (heads, chunk lines) gathered into one buffer each.
   */
  flush(): void {
    const n = this.pieces;
    if (n === 0) return;
    if (n === 1 || this.bytes <= COPY_MAX) this.send(0, n, this.bytes);
    else {
      let from = 0;
      let bytes = 0;
      for (let i = 0; i < n; i++) {
        const size = (this.ends[i] as number) - (this.starts[i] as number);
        if (typeof this.sources[i] === "string" || size < LARGE_PIECE) {
          bytes += size;
          continue;
        }
        if (i > from) this.send(from, i, bytes);
        this.send(i, i + 1, size);
        from = i + 1;
        bytes = 0;
      }
      if (n > from) this.send(from, n, bytes);
    }
    for (let i = 0; i < n; i++) this.sources[i] = "";
    this.pieces = 0;
    this.bytes = 0;
    this.ownAt = 0;
  }

  /**
   * Writes pieces `from` to `to` (of `bytes` in all) in one write: a range as it is, else the pieces
   * gathered into the shared scratch buffer (or a new one, when larger), which the write leaves free.
   */
  private send(from: number, to: number, bytes: number): void {
    const first = this.sources[from] as Uint8Array | string;
    if (to - from === 1 && typeof first !== "string") {
      this.write(first, this.starts[from] as number, this.ends[from] as number, first !== this.ownBytes);
      return;
    }
    // A write that called back into another outbox before returning finds the buffer taken.
    const shared = bytes <= SCRATCH.length && !scratchTaken;
    const out = shared ? SCRATCH : Buffer.allocUnsafe(bytes);
    let at = 0;
    for (let i = from; i < to; i++) {
      const src = this.sources[i] as Uint8Array | string;
      const start = this.starts[i] as number;
      const end = this.ends[i] as number;
      if (typeof src === "string") at += out.write(src, at, "latin1");
      else if (end - start > SMALL_PIECE) at += Buffer.prototype.copy.call(src, out, at, start, end);
      else for (let k = start; k < end; k++) out[at++] = src[k] as number;
    }
    if (!shared) {
      this.write(out, 0, bytes, true);
      return;
    }
    scratchTaken = true;
    try {
      this.write(out, 0, bytes, false);
    } finally {
      scratchTaken = false;
    }
  }

  /**
   * Writes `data[start..end)`; what the socket does not take is queued, as a view when the buffer is
   * `kept` (it stays as it is), else as a copy.
   */
  private write(data: Uint8Array, start: number, end: number, kept: boolean): void {
    if (this.queued === 0) {
      const n = this.socket.write(data, start, end - start);
      if (n >= end - start) return;
      if (n > 0) start += n;
    }
    const rest = kept ? data.subarray(start, end) : copyOf(data, start, end);
    this.queue.push(rest);
    this.queued += rest.length;
  }

  /** From the socket's drain callback; true once everything queued was taken. */
  drain(): boolean {
    while (this.queue.length > 0) {
      const data = this.queue[0] as Uint8Array;
      const n = this.socket.write(data);
      if (n < data.length) {
        if (n > 0) {
          this.queue[0] = data.subarray(n);
          this.queued -= n;
        }
        return false;
      }
      this.queue.shift();
      this.queued -= data.length;
    }
    return true;
  }
}
