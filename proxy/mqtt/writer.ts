/**
 * Writes packets to a socket in the order they were produced, where some are ready now and some (a
 * CONNACK or PUBACK that waits for the notary) later. While the socket is full, the socket that feeds it
 * is paused, so a slow reader holds the sender back (backpressure). A pending item that resolves to
 * undefined writes nothing; one that rejects ends the connection through `fail`.
 */
import type { Socket } from "node:net";

export type Item = Buffer | Promise<Buffer | undefined>;

export class OrderedWriter {
  private readonly pending: Item[] = [];
  private pumping = false;
  private waiting = false;

  constructor(
    private readonly to: Socket,
    private readonly from: Socket,
    private readonly fail: (e: Error) => void,
  ) {}

  write(item: Item): void {
    if (this.pending.length === 0 && Buffer.isBuffer(item)) this.put(item);
    else {
      this.pending.push(item);
      void this.pump();
    }
  }

  private put(b: Buffer): void {
    if (this.to.destroyed) return;
    if (!this.to.write(b) && !this.waiting) {
      this.waiting = true;
      this.from.pause();
      this.to.once("drain", () => {
        this.waiting = false;
        this.from.resume();
      });
    }
  }

  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (this.pending.length > 0) {
        const next = await (this.pending[0] as Item);
        this.pending.shift();
        if (next) this.put(next);
      }
    } catch (e) {
      this.pending.length = 0;
      this.fail(e as Error);
    } finally {
      this.pumping = false;
    }
  }
}
