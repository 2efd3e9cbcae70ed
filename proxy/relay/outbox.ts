import type { Socket } from "bun";

/**
 * Writes to one Bun socket with backpressure: what the kernel (or TLS layer) does not take now is kept
 * in order and written on `drain`. `queued` is what the socket has not taken yet; the relay pauses the
 * other side while it is above its high-water mark.
 *
 * What a message is made of is gathered first (byte ranges of received buffers, and latin1 text the relay
 * writes itself) and goes out in one write on `flush`: a range that continues the previous one of the same
 * buffer extends it, so a message passed on as received is written as the very buffer it arrived in, with
 * no copy; otherwise the pieces are copied into one new buffer.
 */
export class Outbox {
  private readonly queue: Uint8Array[] = [];
  /** Gathered pieces: a buffer and the range of it, or text (start and end unused). */
  private readonly sources: (Uint8Array | string)[] = [];
  private readonly starts: number[] = [];
  private readonly ends: number[] = [];
  private pieces = 0;
  private bytes = 0;
  queued = 0;

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

  /** Writes what was added, as one write when the socket has nothing queued. */
  flush(): void {
    const n = this.pieces;
    if (n === 0) return;
    const first = this.sources[0] as Uint8Array | string;
    let data: Uint8Array;
    if (n === 1 && typeof first !== "string") {
      const start = this.starts[0] as number;
      const end = this.ends[0] as number;
      data = start === 0 && end === first.length ? first : first.subarray(start, end);
    } else {
      const out = Buffer.allocUnsafe(this.bytes);
      let at = 0;
      for (let i = 0; i < n; i++) {
        const src = this.sources[i] as Uint8Array | string;
        const start = this.starts[i] as number;
        const end = this.ends[i] as number;
        if (typeof src === "string") at += out.write(src, at, "latin1");
        else at += Buffer.prototype.copy.call(src, out, at, start, end);
      }
      data = out;
    }
    for (let i = 0; i < n; i++) this.sources[i] = "";
    this.pieces = 0;
    this.bytes = 0;
    this.write(data);
  }

  private write(data: Uint8Array): void {
    if (this.queued === 0) {
      const n = this.socket.write(data);
      if (n >= data.length) return;
      if (n > 0) data = data.subarray(n);
    }
    this.queue.push(data);
    this.queued += data.length;
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
