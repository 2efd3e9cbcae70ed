import type { Duplex } from "node:stream";
import type { Carried } from "./serve-caller.ts";

/**
 * A full-duplex byte pipe between two connected streams (TCP listeners). Each direction is a pipe, so a slow reader
 * pauses the other side's socket instead of letting the proxy buffer (backpressure). A half-close is passed
 * on: when one side ends its sending, the other side's writable end is ended and the opposite direction
 * keeps flowing. When either socket closes or fails, both are closed. Resolves with the byte counts and,
 * as the reason, the first error either side raised (a reset, a TLS alert).
 */
export function pipeBoth(caller: Duplex, target: Duplex): Promise<Carried> {
  return new Promise((resolve) => {
    const result: Carried = { toTarget: 0, toCaller: 0 };
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      caller.destroy();
      target.destroy();
      resolve(result);
    };
    const failed = (e: Error) => {
      result.reason ??= e.message;
      finish();
    };
    caller.on("data", (chunk: Buffer) => {
      result.toTarget += chunk.length;
    });
    target.on("data", (chunk: Buffer) => {
      result.toCaller += chunk.length;
    });
    caller.on("error", failed);
    target.on("error", failed);
    // A socket closes once both its directions are done (or it was destroyed): nothing more can move.
    caller.once("close", finish);
    target.once("close", finish);
    caller.pipe(target);
    target.pipe(caller);
  });
}
