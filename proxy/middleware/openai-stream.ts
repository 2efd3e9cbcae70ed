/**
 * A streamed chat completion through the openai middleware (docs/openai.md, "Streaming"): the target's
 * server-sent events reach the caller one by one as they arrive, each chunk filtered to CHUNK_MODEL and
 * checked; `[DONE]` ends the stream; comments and keep-alives pass. A fault (an event that is no chunk,
 * one over EVENT_LIMIT, a stream over RESPONSE_LIMIT, a target that breaks off or sends nothing for
 * timeouts.idle) ends the stream with an error event, a log line and a metric. With the notary at
 * logRequest or signRequest, the exchange is recorded once the stream ends, before its closing event is
 * sent, so that a caller who saw the end finds the receipt (docs/notary.md, "Streamed receipts").
 */
import { createHash, randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import type { EventSourceMessage } from "eventsource-parser";
import { isSvcError } from "../../lib/errors.ts";
import {
  ChatAssembler,
  chunkProblem,
  commentText,
  DONE,
  EVENT_LIMIT,
  eventKind,
  eventText,
  SseReader,
  type StreamRecord,
} from "../../lib/notary-objects/chat-stream.ts";
import { type Level, STREAM_HEADER } from "../../lib/notary-objects/levels.ts";
import { CallerStalled, type ProxyRequest, type ProxyResponse } from "../http/types.ts";
import type { ListenerEvents } from "../listener.ts";
import { recordExchange } from "../notary-service/notarize-exchange.ts";
import type { Notary } from "../notary-service/notary.ts";
import { applyModel, CHUNK_MODEL, ERROR_MODEL } from "./openai-model.ts";

/** How a stream ended: the label of svc_proxy_openai_streams_total and the receipt's `stream.end`. */
type StreamEnd =
  | "done"
  | "closed"
  | "caller_gone"
  | "target_error"
  | "invalid_event"
  | "too_large"
  | "target_failed"
  | "stalled"
  | "notary_unavailable";

export interface StreamNotarization {
  notary: Notary;
  level: Level;
  origin: string;
  statementId: string;
  /** The statement's headers, sent with the stream's head. */
  headers: Record<string, string>;
}

interface StreamOptions {
  req: ProxyRequest;
  /** The target's answer: 200, text/event-stream. */
  res: ProxyResponse & { body: Readable };
  /** The request body as the caller sent it, and as forwarded when the filter changed it. */
  requestBody: Uint8Array;
  forwardedBody: Uint8Array;
  /** The bound on the bytes the target may send, and on those the caller is sent, in all. */
  limit: number;
  /** timeouts.idle: the longest the target may send nothing, or the caller read nothing. */
  idleMs: number;
  events: ListenerEvents | undefined;
  notarize: StreamNotarization | undefined;
}

/** The caller's answer: its head at once, then each event as the target's arrives. */
export function streamAnswer(o: StreamOptions): ProxyResponse {
  const { req, res, notarize } = o;
  const target = res.body;
  const log = req.log;
  // The exchange is kept whole only for the notary's record (logRequest stores bodies); a receipt also
  // needs the chunks assembled. Without either, memory is one event at most.
  const recording = notarize && notarize.level !== "workload" ? notarize : undefined;
  const streamId = recording?.level === "signRequest" ? randomBytes(32).toString("base64url") : undefined;
  let assembler = streamId ? new ChatAssembler() : undefined;
  let sent: Buffer[] | undefined = recording ? [] : undefined;
  const upstream = recording ? createHash("sha256") : undefined;
  let upstreamLength = 0;
  let sentLength = 0;
  let chunks = 0;
  let sawDone = false;
  let ended: StreamEnd | undefined;
  /** Bounds a pause: of the target while the stream runs, of the caller's reading until its end is read. */
  let idle: ReturnType<typeof setTimeout> | undefined;

  const headers = {
    ...res.headers,
    ...notarize?.headers,
    ...(streamId ? { [STREAM_HEADER]: streamId } : {}),
  };
  delete headers["content-length"];
  delete headers["transfer-encoding"];
  let waiting = false;
  const out = new Readable({
    read: () => {
      // Each read is progress: the caller's pause is timed from it.
      if (ended || waiting) armIdle();
      if (!waiting) return;
      waiting = false;
      if (!ended) target.resume();
    },
  });
  // "close" follows "end" too.
  out.once("close", () => clearTimeout(idle));

  // What the events of one piece from the target came to, passed on in one write.
  let batch = "";
  const flush = () => {
    if (!batch) return;
    const bytes = Buffer.from(batch);
    batch = "";
    sentLength += bytes.length;
    sent?.push(bytes);
    if (!out.push(bytes)) waiting = true;
    if (waiting && !ended) target.pause();
  };

  /**
   * Ends the stream, logged (at warn with `reason` for a fault, else at debug): stops reading the target,
   * records the exchange when the notary asks for it (with `last`, the closing event: [DONE] or an error),
   * then sends `last` and the end. Clients stop reading at the closing event, so it waits for the record:
   * a caller that saw it finds the receipt. From then on the caller has timeouts.idle to read what is left.
   */
  const finish = (end: StreamEnd, last = "", reason?: string) => {
    if (ended) return;
    if (reason) log.warn("openai: stream ended", { end, reason, chunks });
    else log.debug("openai: stream ended", { end, chunks });
    flush();
    const closing = last ? Buffer.from(last) : undefined;
    if (closing) sent?.push(closing);
    ended = end;
    clearTimeout(idle);
    target.removeListener("data", received);
    req.signal.removeEventListener("abort", callerGone);
    if (!target.readableEnded) {
      // After [DONE] the rest of the target's answer is read and dropped, so that its connection can
      // serve again; a target that does not end within timeouts.idle loses it.
      if (end === "done") {
        const drop = setTimeout(() => target.destroy(), o.idleMs);
        target.once("end", () => clearTimeout(drop)).once("close", () => clearTimeout(drop));
        target.resume();
      } else target.destroy();
    }
    void (recording ? notarized(end) : Promise.resolve(undefined)).then((refused) => {
      o.events?.chatStream(ended as StreamEnd);
      sent = undefined;
      assembler = undefined;
      // A stream the notary could not record closes by saying so instead.
      const told = refused === undefined ? closing : Buffer.from(errorEvent("notary_unavailable", refused));
      if (told && end !== "caller_gone") out.push(told);
      out.push(null);
      if (!out.readableEnded && !out.destroyed) armIdle();
    });
  };

  /** The proxy's own error event, which OpenAI's clients raise as an API error, then the end. */
  const fail = (end: StreamEnd, message: string) => finish(end, errorEvent(end, message), message);

  /** Records the stream; never throws: a record that cannot be made is logged, and the caller told why. */
  const notarized = async (end: StreamEnd): Promise<string | undefined> => {
    const r = recording as StreamNotarization;
    try {
      const stream: StreamRecord | undefined =
        assembler && streamId ? { id: streamId, chunks, end, message: assembler.digest() } : undefined;
      await recordExchange(r.notary, r.level, r.origin, r.statementId, {
        req,
        requestBody: o.requestBody,
        ...(o.forwardedBody !== o.requestBody ? { forwardedBody: o.forwardedBody } : {}),
        status: 200,
        responseHeaders: headers,
        responseBody: Buffer.concat(sent ?? []),
        upstreamBody: { length: upstreamLength, sha256: upstream?.digest("hex") ?? "" },
        ...(stream ? { stream } : {}),
      });
      return undefined;
    } catch (e) {
      const reason = isSvcError(e) ? e.message : `the notary failed: ${(e as Error).message}`;
      log.error("notary unavailable", { reason });
      ended = "notary_unavailable";
      return `notary: unavailable: ${reason}; this stream was not recorded`;
    }
  };

  /** One event: passed on, filtered and checked; the end at [DONE], a fault, or the target's error. */
  const onEvent = (e: EventSourceMessage) => {
    if (ended || sawDone) return;
    const kind = eventKind(e);
    if (kind === "done") {
      sawDone = true;
      return;
    }
    const n = chunks + 1;
    let value: unknown;
    try {
      value = JSON.parse(e.data);
    } catch {
      return fail("invalid_event", `event ${n} from the target is not JSON`);
    }
    const object = value !== null && typeof value === "object" && !Array.isArray(value);
    if (kind === "error" || (object && (value as { error?: unknown }).error !== undefined)) {
      // The target's own error: passed on as an error event, its message kept, then the end.
      const kept = applyModel(value, ERROR_MODEL) as { error?: unknown } | undefined;
      return finish(
        "target_error",
        eventText({ event: "error", data: JSON.stringify(kept?.error !== undefined ? kept : { error: {} }) }),
        "the target sent an error event",
      );
    }
    if (kind === "typed")
      return fail("invalid_event", `event ${n} from the target has the type ${JSON.stringify(e.event)}`);
    const removed: string[] = [];
    const chunk = applyModel(value, CHUNK_MODEL, removed);
    const problem = chunk === undefined ? "it nests too deep" : chunkProblem(chunk);
    if (problem)
      return fail("invalid_event", `event ${n} from the target is not a chat-completion chunk: ${problem}`);
    if (removed.length) log.debug("openai: chunk fields removed", { fields: removed });
    // A filtered chunk is written anew; JSON.stringify can write a number longer than it came.
    const text = eventText({ data: removed.length ? JSON.stringify(chunk) : e.data });
    if (text.length > EVENT_LIMIT)
      return fail("too_large", `event ${n} is larger than ${EVENT_LIMIT} characters once filtered`);
    chunks = n;
    assembler?.add(chunk as Record<string, unknown>);
    batch += text;
  };

  const reader = new SseReader({
    event: (e) => {
      try {
        onEvent(e);
      } catch (err) {
        // JSON.stringify of what JSON.parse read can still fail (nesting deep inside a field kept whole).
        fail(
          "invalid_event",
          `event ${chunks + 1} from the target could not be read: ${(err as Error).message}`,
        );
      }
    },
    comment: (text) => {
      if (!ended && !sawDone) batch += commentText(text);
    },
  });

  function armIdle() {
    clearTimeout(idle);
    idle = setTimeout(() => {
      if (!waiting && !ended)
        return fail("stalled", `the target sent nothing for ${o.idleMs} ms (timeouts.idle)`);
      // A caller that reads nothing cannot be sent an error event: its answer is cut off.
      const reason = `the caller read nothing for ${o.idleMs} ms (timeouts.idle)`;
      if (ended) log.warn("openai: answer cut off", { reason, end: ended });
      else finish("stalled", "", reason);
      out.destroy(new CallerStalled(reason));
    }, o.idleMs);
  }
  const received = (piece: Buffer) => {
    if (ended) return;
    armIdle();
    upstreamLength += piece.length;
    upstream?.update(piece);
    if (upstreamLength > o.limit)
      return fail("too_large", `the target sent more than ${o.limit} bytes (the openai middleware's bound)`);
    if (!reader.feed(piece)) return fail("too_large", reader.overLimit);
    if (sentLength + batch.length > o.limit)
      return fail(
        "too_large",
        `the stream came to more than ${o.limit} bytes (the openai middleware's bound)`,
      );
    if (sawDone) finish("done", eventText({ data: DONE }));
    else flush();
  };
  const callerGone = () => finish("caller_gone");

  target.on("data", received);
  target.once("end", () => {
    if (ended) return;
    if (reader.end()) return fail("target_failed", "the target's stream stopped in the middle of an event");
    finish("closed");
  });
  // `on`, not `once`: a destroyed target may report more than one error, and each is this stream's.
  target.on("error", (e) => fail("target_failed", `the target's stream broke off: ${e.message}`));
  // A stream closed without its end (its connection reset, or closed before this listener was added).
  target.once("close", () => fail("target_failed", "the target's stream was closed before its end"));
  if (target.destroyed)
    queueMicrotask(() => fail("target_failed", "the target's stream was closed before its end"));
  if (req.signal.aborted) queueMicrotask(callerGone);
  else req.signal.addEventListener("abort", callerGone, { once: true });
  armIdle();

  return { status: 200, headers, body: out, open: true, ...(res.upstream ? { upstream: res.upstream } : {}) };
}

function errorEvent(end: StreamEnd, message: string): string {
  return eventText({
    event: "error",
    data: JSON.stringify({ error: { message: `svc-proxy: ${message}`, type: "svc_proxy_error", code: end } }),
  });
}
