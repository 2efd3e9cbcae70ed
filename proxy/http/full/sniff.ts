import type net from "node:net";
import { PREFACE as CLIENT_PREFACE } from "../../../lib/http2/frames.ts";

/** HTTP/2's connection preface starts with these bytes; no HTTP/1.1 request line does. */
const PREFACE = CLIENT_PREFACE.subarray(0, 14);

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
    const n = Math.min(seen.length, PREFACE.length);
    const h2 = seen.subarray(0, n).equals(PREFACE.subarray(0, n));
    if (h2 && n < PREFACE.length) return;
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
