/**
 * A measuring stick for bench/hop-cost.ts, not product code: one plaintext hop on Bun's own sockets that
 * relays bytes as they come and, by mode, also does part of what the relay listener does per request:
 *
 *   bytes    relays bytes only
 *   framing  also frames each request and response with proxy/http/wire (the results are dropped)
 *   heads    also builds the heads the relay would send, and sends those instead of the received ones
 *
 *   bun bench/hop-variants.ts <mode> <listenPort> <targetPort>
 */
import type { Socket } from "bun";
import { namedByConnection, requestHead, responseHead } from "../proxy/http/relay/head.ts";
import { Outbox } from "../proxy/http/relay/outbox.ts";
import { RequestFramer, type RequestHead } from "../proxy/http/wire/request-framer.ts";
import { ResponseFramer, type ResponseHead } from "../proxy/http/wire/response-framer.ts";
import type { MessageSink } from "../proxy/http/wire/wire.ts";

const [mode = "bytes", listen, target] = process.argv.slice(2);
const framing = mode !== "bytes";
const heads = mode === "heads";

interface Hop {
  upstream: Socket<Hop> | undefined;
  pending: Uint8Array[];
  requests: RequestFramer;
  responses: ResponseFramer;
  out: Outbox | undefined;
  /** heads: what the request sink built for the upstream from the last chunk. */
  toUpstream: Uint8Array[];
  fromCaller: MessageSink<RequestHead>;
}

const ignore = { body() {}, end() {}, error() {} };
const NONE = { kind: "none" as const };

Bun.listen<Hop>({
  hostname: "127.0.0.1",
  port: Number(listen),
  socket: {
    open(caller) {
      const hop: Hop = {
        upstream: undefined,
        pending: [],
        requests: new RequestFramer(),
        responses: new ResponseFramer(),
        out: heads ? new Outbox(caller as Socket<unknown>) : undefined,
        toUpstream: [],
        fromCaller: {
          ...ignore,
          head: (h) => {
            hop.responses.expect(h.method);
            if (!heads) return;
            const body = h.body.kind === "fixed" ? { kind: "length" as const, length: h.body.length } : NONE;
            hop.toUpstream.push(
              requestHead(h, namedByConnection(h.special), body, {
                peer: undefined,
                requestId: crypto.randomUUID(),
                remoteAddress: caller.remoteAddress,
              }),
            );
          },
          body: (src, start, end) => {
            if (heads) hop.toUpstream.push(src.subarray(start, end));
          },
        },
      };
      caller.data = hop;
      const fromUpstream: MessageSink<ResponseHead> = {
        ...ignore,
        head: (h) => {
          if (hop.out)
            responseHead(
              h,
              h.body.kind === "fixed" ? { kind: "length", length: h.body.length } : { kind: "none" },
              false,
              hop.out,
            );
        },
        body: (src, start, end) => hop.out?.addRange(src, start, end),
      };
      void Bun.connect<Hop>({
        hostname: "127.0.0.1",
        port: Number(target),
        data: hop,
        socket: {
          open(up) {
            hop.upstream = up;
            for (const c of hop.pending) up.write(c);
          },
          data(_up, chunk) {
            if (framing) hop.responses.feed(chunk, fromUpstream);
            if (hop.out) hop.out.flush();
            else caller.write(chunk);
          },
          close() {
            caller.end();
          },
          error() {},
        },
      });
    },
    data(caller, chunk) {
      const hop = caller.data;
      if (framing) hop.requests.feed(chunk, hop.fromCaller);
      const out = heads ? hop.toUpstream.splice(0) : [chunk];
      for (const piece of out)
        if (hop.upstream) hop.upstream.write(piece);
        else hop.pending.push(piece);
    },
    close(caller) {
      caller.data.upstream?.end();
    },
    error() {},
  },
});
