import type net from "node:net";
import { opensPreface } from "../../../lib/http2/frames.ts";

/**
 * Reads until the first bytes tell HTTP/2's preface from HTTP/1.1, puts them back, and says which. A
 * caller that sends nothing within `timeoutMs` is disconnected.
 */
export function sniff(socket: net.Socket, timeoutMs: number, then: (h2: boolean) => void): void {
  let seen = Buffer.alloc(0);
  const timer = setTimeout(() => socket.destroy(), timeoutMs);
  socket.once("close", () => clearTimeout(timer));
  const onData = (chunk: Buffer) => {
    seen = Buffer.concat([seen, chunk]);
    const h2 = opensPreface(seen);
    if (h2 === undefined) return;
    clearTimeout(timer);
    socket.off("data", onData);
    socket.pause();
    socket.unshift(seen);
    then(h2);
    socket.resume();
  };
  socket.on("data", onData);
  socket.once("error", () => socket.destroy());
}
