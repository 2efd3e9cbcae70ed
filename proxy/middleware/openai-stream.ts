/**
 * A streamed chat completion through the openai middleware (docs/openai.md, "Streaming"): the target's
 * server-sent events reach the caller one by one as they arrive, each chunk filtered to CHUNK_MODEL and
 * checked; `[DONE]`, comments and keep-alives pass. A fault (an event that is no chunk, one over
 * EVENT_LIMIT, a stream over RESPONSE_LIMIT, a target that breaks off or sends nothing for timeouts.idle)
 * ends the stream with an error event, a log line and a metric. With the notary at logRequest or
 * signRequest, the exchange is recorded once the stream ends, before its last byte is sent, so that a
 * caller who saw the end finds the receipt (docs/notary.md, "Streamed receipts").
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
  eventText,
  SseReader,
  type StreamRecord,
} from "../../lib/notary-objects/chat-stream.ts";
import type { BodyDigest } from "../../lib/notary-objects/ids.ts";
import { type Level, STREAM_HEADER } from "../../lib/notary-objects/levels.ts";
import type { ProxyRequest, ProxyResponse } from "../http/types.ts";
import type { ListenerEvents } from "../listener.ts";
import { recordExchange } from "../notary-service/notarize-exchange.ts";
import type { Notary } from "../notary-service/notary.ts";
import { applyModel, CHUNK_MODEL, ERROR_MODEL } from "./openai-model.ts";

/** How a stream ended: the label of svc_proxy_openai_streams_total and the receipt's `stream.end`. */
export type StreamEnd =
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

export interface StreamOptions {
  req: ProxyRequest;
  /** The target's answer: 200, text/event-stream. */
  res: ProxyResponse & { body: Readable };
  /** The request body as the caller sent it, and as forwarded when the filter changed it. */
  requestBody: Uint8Array;
  forwardedBody: Uint8Array;
  /** The bound on the bytes the target may send in all. */
  limit: number;
  /** timeouts.idle: the longest the target may send nothing. */
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
  const signing = recording?.level === "signRequest";
  const streamId = signing ? randomBytes(32).toString("base64url") : undefined;
  const assembler = signing ? new ChatAssembler() : undefined;
  const sent: Buffer[] | undefined = recording ? [] : undefined;
  const upstream = recording ? createHash("sha256") : undefined;
  let upstreamLength = 0;
  let chunks = 0;
  let sawDone = false;
  let ended: StreamEnd | undefined;
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
      if (!waiting || ended) return;
      waiting = false;
      armIdle();
      target.resume();
    },
  });

  // What the events of one piece from the target came to, passed on in one write.
  let batch = "";
  const write = (text: string) => {
    batch += text;
  };
  const flush = () => {
    if (!batch) return;
    const bytes = Buffer.from(batch);
    batch = "";
    sent?.push(bytes);
    if (!out.push(bytes) && !waiting) {
      waiting = true;
      target.pause();
    }
  };

  /** Ends the stream: records the exchange when the notary asks for it, then sends the end. */
  const finish = (end: StreamEnd) => {
    if (ended) return;
    ended = end;
    clearTimeout(idle);
    target.removeListener("data", received);
    if (!target.readableEnded) target.destroy();
    req.signal.removeEventListener("abort", callerGone);
    const record = recording ? notarized(end) : Promise.resolve();
    void record.then(() => {
      o.events?.chatStream(ended as StreamEnd);
      out.push(null);
    });
  };

  /** The proxy's own error event, which OpenAI's clients raise as an API error, then the end. */
  const fail = (end: StreamEnd, message: string) => {
    if (ended) return;
    log.warn("openai: stream ended", { end, reason: message, chunks });
    write(errorEvent(end, message));
    flush();
    finish(end);
  };

  const notarized = async (end: StreamEnd) => {
    const r = recording as StreamNotarization;
    const responseBody = Buffer.concat(sent as Buffer[]);
    const stream: StreamRecord | undefined =
      assembler && streamId ? { id: streamId, chunks, end, message: assembler.digest() } : undefined;
    const upstreamBody: BodyDigest = {
      length: upstreamLength,
      sha256: (upstream as ReturnType<typeof createHash>).digest("hex"),
    };
    try {
      await recordExchange(r.notary, r.level, r.origin, r.statementId, {
        req,
        requestBody: o.requestBody,
        ...(o.forwardedBody !== o.requestBody ? { forwardedBody: o.forwardedBody } : {}),
        status: 200,
        responseHeaders: headers,
        responseBody,
        upstreamBody,
        ...(stream ? { stream } : {}),
      });
    } catch (e) {
      const reason = isSvcError(e) ? e.message : `the notary failed: ${(e as Error).message}`;
      log.error("notary unavailable", { reason });
      ended = "notary_unavailable";
      // The caller is still there to be told that this stream has no record.
      if (end !== "caller_gone")
        out.push(
          Buffer.from(
            errorEvent("notary_unavailable", `notary: unavailable: ${reason}; this stream was not recorded`),
          ),
        );
    }
  };

  const onEvent = (e: EventSourceMessage) => {
    if (ended) return;
    if (e.data === DONE) {
      sawDone = true;
      write(eventText(e));
      return;
    }
    let value: unknown;
    try {
      value = JSON.parse(e.data);
    } catch {
      return fail("invalid_event", `event ${chunks + 1} from the target is not JSON`);
    }
    const object = value !== null && typeof value === "object" && !Array.isArray(value);
    if (e.event === "error" || (object && (value as { error?: unknown }).error !== undefined)) {
      // The target's own error: passed on as an error event, its message kept, then the end.
      const kept = applyModel(value, ERROR_MODEL) as { error?: unknown };
      log.warn("openai: stream ended", { end: "target_error", chunks });
      write(
        eventText({
          event: "error",
          data: JSON.stringify(kept?.error !== undefined ? kept : { error: kept }),
        }),
      );
      flush();
      return finish("target_error");
    }
    const removed: string[] = [];
    const chunk = applyModel(value, CHUNK_MODEL, removed);
    const problem = chunk === undefined ? "it nests too deep" : chunkProblem(chunk);
    if (problem)
      return fail(
        "invalid_event",
        `event ${chunks + 1} from the target is not a chat-completion chunk: ${problem}`,
      );
    if (removed.length) log.debug("openai: chunk fields removed", { fields: removed });
    chunks++;
    assembler?.add(chunk as Record<string, unknown>);
    write(eventText({ ...e, data: removed.length ? JSON.stringify(chunk) : e.data }));
  };

  const reader = new SseReader({
    event: onEvent,
    comment: (text) => {
      if (!ended) write(commentText(text));
    },
    retry: (ms) => {
      if (!ended) write(`retry: ${ms}\n\n`);
    },
  });

  const armIdle = () => {
    clearTimeout(idle);
    idle = setTimeout(() => {
      if (!waiting) return fail("stalled", `the target sent nothing for ${o.idleMs} ms (timeouts.idle)`);
      // A caller that reads nothing cannot be sent an error event: its answer is cut off.
      const reason = `the caller read nothing for ${o.idleMs} ms (timeouts.idle)`;
      log.warn("openai: stream ended", { end: "stalled", reason, chunks });
      finish("stalled");
      out.destroy(new Error(reason));
    }, o.idleMs);
  };
  const received = (chunk: Buffer) => {
    if (ended) return;
    armIdle();
    upstreamLength += chunk.length;
    upstream?.update(chunk);
    if (upstreamLength > o.limit)
      return fail(
        "too_large",
        `the stream is larger than ${o.limit} bytes (the openai middleware's response bound)`,
      );
    if (!reader.feed(chunk)) fail("too_large", reader.overLimit);
    flush();
  };
  const callerGone = () => {
    log.debug("openai: stream ended", { end: "caller_gone", chunks });
    finish("caller_gone");
  };

  target.on("data", received);
  target.once("end", () => {
    if (ended) return;
    if (reader.end()) return fail("target_failed", "the target's stream stopped in the middle of an event");
    log.debug("openai: stream ended", { end: sawDone ? "done" : "closed", chunks });
    finish(sawDone ? "done" : "closed");
  });
  // `on`, not `once`: a destroyed target may report more than one error, and each is this stream's.
  target.on("error", (e) => fail("target_failed", `the target's stream broke off: ${e.message}`));
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
