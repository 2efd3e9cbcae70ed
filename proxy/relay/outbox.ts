import type { Socket } from "bun";

/**
 * Writes to one Bun socket with backpressure: what the kernel (or TLS layer) does not take now is kept
 * in order and written on `drain`. `queued` is what the socket has not taken yet; the relay pauses the
 * other side while it is above its high-water mark. Pieces gathered with `add` go out in one write.
 */
export class Outbox {
  private readonly queue: Uint8Array[] = [];
  private gathered: Uint8Array[] = [];
  queued = 0;

  constructor(private readonly socket: Socket<unknown>) {}

  /** Adds a piece to the next flush. */
  add(data: Uint8Array): void {
    if (data.length > 0) this.gathered.push(data);
  }

  /** Writes what was added, as one write when the socket has nothing queued. */
  flush(): void {
    const g = this.gathered;
    if (g.length === 0) return;
    this.gathered = [];
    this.write(g.length === 1 ? (g[0] as Uint8Array) : Buffer.concat(g));
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
