import type { BodyEvent, Event, MessageSink } from "../../proxy/http/wire/wire.ts";

/**
 * What a framer delivers to its sink during `drive`, as a list of events, for assertions:
 * `framed((sink) => framer.feed(bytes, sink))`, `framed((sink) => framer.closed(sink))`.
 */
export function framed<Head>(
  drive: (sink: Required<MessageSink<Head>>) => void,
): (Event<Head> | BodyEvent)[] {
  const events: (Event<Head> | BodyEvent)[] = [];
  drive({
    head: (head) => events.push({ type: "head", head }),
    body: (src, start, end) => events.push({ type: "body", data: src.subarray(start, end) }),
    end: () => events.push({ type: "end" }),
    error: (status, reason) => events.push({ type: "error", status, reason }),
    tunnel: () => events.push({ type: "tunnel" }),
  });
  return events;
}
