import { Duplex } from "node:stream";
import type { Socket } from "bun";
import type { VerifiedPeer } from "../../../lib/spiffe/x509svid.ts";
import type { HandedOver } from "../full/listener.ts";
import { HIGH_WATER, Outbox } from "./outbox.ts";

/**
 * An HTTP/1.1 caller of a relay listener whose target speaks HTTP/2: the relay accepted the connection
 * and verified the caller; its bytes are handed to the full path's HTTP/1.1 server as a stream, which
 * translates each request for the target. Backpressure holds both ways: the caller is not read while the
 * full path has not taken what was read, and the full path waits while the caller has not taken its
 * answers. The full path times the connection (its idle and head timeouts), so the relay's sweep does not.
 */
export class HandoverConn {
  readonly deadline = Number.POSITIVE_INFINITY;
  readonly idle = true;
  private readonly out: Outbox;
  private readonly stream: HandedOver;
  /** The full path's write that waits for the caller to take what is queued. */
  private waiting: (() => void) | undefined;

  constructor(
    private readonly socket: Socket<unknown>,
    serve: (conn: HandedOver, peer: VerifiedPeer | undefined) => void,
    peer: VerifiedPeer | undefined,
    first?: Uint8Array,
  ) {
    const out = new Outbox(socket);
    this.out = out;
    this.stream = Object.assign(
      new Duplex({
        read: () => socket.resume(),
        write: (chunk: Uint8Array, _encoding, done) => {
          out.add(chunk);
          out.flush();
          if (out.queued > HIGH_WATER) this.waiting = () => done();
          else done();
        },
        final: (done) => {
          if (out.queued === 0) socket.end();
          done();
        },
        destroy: (error, done) => {
          socket.terminate();
          done(error);
        },
      }),
      { remoteAddress: socket.remoteAddress },
    );
    serve(this.stream, peer);
    if (first?.length) this.received(first);
  }

  received(data: Uint8Array): void {
    if (!this.stream.push(data)) this.socket.pause();
  }

  drained(): void {
    if (!this.out.drain()) return;
    if (this.stream.writableFinished) this.socket.end();
    const w = this.waiting;
    this.waiting = undefined;
    w?.();
  }

  expire(): void {}

  terminate(): void {
    this.stream.destroy();
  }

  gone(): void {
    this.stream.push(null);
    this.stream.destroy();
  }
}
