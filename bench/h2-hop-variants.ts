/**
 * A measuring stick for bench/h2-hop-cost.ts, not product code: one plaintext HTTP/2 (h2c) hop on Bun's
 * own sockets that, by mode, does part of what the HTTP/2 relay does per call:
 *
 *   bytes    relays bytes only
 *   framing  also reads every frame (lib/http2/frames.ts) and passes each on as the bytes it came in
 *   headers  also decodes every header block and encodes it again for the other side (lib/http2/hpack.ts),
 *            with no header policy; SETTINGS pass through, so both sides keep the default table size
 *
 *   bun bench/h2-hop-variants.ts <mode> <listenPort> <targetPort>
 */
import type { Socket } from "bun";
import {
  collect,
  FLAG,
  FRAME,
  FrameReader,
  HeaderBlocks,
  headerFrames,
  PREFACE,
} from "../lib/http2/frames.ts";
import { HpackDecoder, HpackEncoder } from "../lib/http2/hpack.ts";
import { Outbox } from "../proxy/http/relay/outbox.ts";

const [mode = "bytes", listen, target] = process.argv.slice(2);
const HIGH_WATER = 256 * 1024;

interface Side {
  socket: Socket<Side>;
  out: Outbox;
  peer: Side | undefined;
  pending: Uint8Array[];
  frames: FrameReader;
  blocks: HeaderBlocks;
  decoder: HpackDecoder;
  /** Encodes what this side receives, for its peer. */
  encoder: HpackEncoder;
  /** The caller's side: its preface (which the frame reader takes off) is still to be passed on. */
  preface: boolean;
}

const side = (socket: Socket<Side>, caller: boolean): Side => ({
  socket,
  out: new Outbox(socket as Socket<unknown>),
  peer: undefined,
  pending: [],
  frames: new FrameReader(16_384, caller),
  blocks: new HeaderBlocks(128 * 1024),
  decoder: new HpackDecoder(),
  encoder: new HpackEncoder(),
  preface: caller,
});

function pass(from: Side, to: Side, chunk: Uint8Array): void {
  if (mode === "bytes") to.out.add(chunk);
  else {
    if (from.preface) {
      to.out.add(PREFACE);
      from.preface = false;
    }
    for (const f of from.frames.push(chunk)) {
      if (mode === "headers") {
        const block = from.blocks.take(f);
        if (block) {
          const fields = from.decoder.decode(block.block);
          const flags = block.headers.flags & FLAG.END_STREAM;
          const pieces: Uint8Array[] = [];
          headerFrames(f.stream, from.encoder.encode(fields), flags, 16_384, collect(pieces));
          for (const p of pieces) to.out.add(p);
          continue;
        }
        if (f.type === FRAME.HEADERS || f.type === FRAME.CONTINUATION) continue;
      }
      to.out.addRange(f.src, f.start, f.end);
    }
  }
  to.out.flush();
  if (to.out.queued > HIGH_WATER) from.socket.pause();
}

const handlers = {
  data(s: Socket<Side>, chunk: Uint8Array) {
    const me = s.data;
    if (me.peer) pass(me, me.peer, chunk);
    else me.pending.push(new Uint8Array(chunk));
  },
  drain(s: Socket<Side>) {
    const me = s.data;
    if (me.out.drain()) me.peer?.socket.resume();
  },
  close(s: Socket<Side>) {
    s.data.peer?.socket.end();
  },
  error() {},
};

Bun.listen<Side>({
  hostname: "127.0.0.1",
  port: Number(listen),
  socket: {
    ...handlers,
    open(inbound) {
      inbound.data = side(inbound, true);
      void Bun.connect<Side>({
        hostname: "127.0.0.1",
        port: Number(target),
        socket: {
          ...handlers,
          open(out) {
            out.data = side(out, false);
            out.data.peer = inbound.data;
            inbound.data.peer = out.data;
            for (const chunk of inbound.data.pending) pass(inbound.data, out.data, chunk);
            inbound.data.pending = [];
          },
        },
      });
    },
  },
});
