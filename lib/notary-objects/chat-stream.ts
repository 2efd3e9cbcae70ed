/**
 * Streamed chat completions (docs/openai.md, "Streaming"; docs/notary.md, "Streamed receipts"): the
 * server-sent events an OpenAI-compatible target sends, read with eventsource-parser within a bound, each
 * chunk checked, and the chunks assembled into the one chat.completion they stand for. The proxy's openai
 * middleware and `svc notary verify` use the same reader and assembler, so that a receipt's assembled
 * message is checked by the code that made it.
 */
import { createParser, type EventSourceMessage } from "eventsource-parser";
import { SvcError } from "../errors.ts";
import { type BodyDigest, bodyDigest } from "./ids.ts";

/** The largest single event (its lines and an unfinished line), in characters. */
export const EVENT_LIMIT = 1024 * 1024;
/** A chunk's `choices[].index` and `tool_calls[].index` are below this. */
const MAX_INDEX = 128;
/** The data of the event that ends an OpenAI stream. */
export const DONE = "[DONE]";

interface SseHandlers {
  event(e: EventSourceMessage): void;
  comment?(text: string): void;
}

/**
 * What an event of a chat-completion stream is: `done` ([DONE]), `error` (an error event), `typed` (an
 * event of another type: a chat-completion stream has none, and clients read them differently), or
 * `data` (a chunk, once it parses and passes chunkProblem). The proxy passes on and the verifier reads by
 * this one rule.
 */
export function eventKind(e: EventSourceMessage): "done" | "error" | "typed" | "data" {
  if (e.data === DONE) return "done";
  if (e.event === "error") return "error";
  return e.event === undefined || e.event === "message" ? "data" : "typed";
}

/**
 * An SSE byte stream read event by event, as the SSE specification says (CRLF, CR and LF line ends,
 * `data:` with or without a space, UTF-8 with replacement), holding at most `limit` characters of an
 * event or unfinished line.
 */
export class SseReader {
  // The parser strips a leading byte-order mark itself; the decoder must not strip another.
  private readonly decoder = new TextDecoder("utf-8", { ignoreBOM: true });
  private readonly parser;
  private overflow = false;
  /** While end() flushes: an event or comment dispatched then was cut off by the end of the stream. */
  private ending = false;
  private cut = false;

  constructor(
    on: SseHandlers,
    private readonly limit = EVENT_LIMIT,
  ) {
    this.parser = createParser({
      maxBufferSize: limit,
      onEvent: (e) => {
        if (this.ending) this.cut = true;
        // The parser bounds what it holds between feeds; an event that came whole in one piece is
        // measured here, so that the limit is the same however the bytes were split.
        else if (e.data.length > limit) this.overflow = true;
        else if (!this.overflow) on.event(e);
      },
      onComment: (text) => {
        if (this.ending) this.cut = true;
        else on.comment?.(text);
      },
      onError: (e) => {
        if (e.type === "max-buffer-size-exceeded") this.overflow = true;
      },
    });
  }

  /** False when an event went over the limit: nothing more is read. */
  feed(bytes: Uint8Array): boolean {
    if (!this.overflow) this.parser.feed(this.decoder.decode(bytes, { stream: true }));
    return !this.overflow;
  }

  /** Why feed() returned false. */
  get overLimit(): string {
    return `an event is larger than ${this.limit} characters (the limit per event)`;
  }

  /** The end of the stream; true when it stopped in the middle of an event (what was left is dropped). */
  end(): boolean {
    const rest = this.decoder.decode();
    this.ending = true;
    if (!this.overflow) this.parser.feed(`${rest}\n\n`);
    return this.cut;
  }
}

/**
 * An event as the proxy writes it: its type when it has one, one `data:` line per line of data, then a
 * blank line. The data's U+0085, U+2028 and U+2029, which some clients split lines at, are written as JSON
 * escapes: in JSON text they can only stand inside strings, where the escape means the same character.
 */
export function eventText(e: { data: string; event?: string }): string {
  const s = e.event !== undefined ? `event: ${e.event}\n` : "";
  const data = e.data.replace(SPLITTERS, escapeChar);
  if (!data.includes("\n")) return `${s}data: ${data}\n\n`;
  return `${s}${data
    .split("\n")
    .map((line) => `data: ${line}\n`)
    .join("")}\n`;
}

const SPLITTERS = /[\u0085\u2028\u2029]/g;
const escapeChar = (c: string) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`;

/** A comment (a keep-alive) as the proxy writes it: printable ASCII only. */
export const commentText = (text: string) => `: ${text.replace(/[^\x20-\x7e]/g, "")}\n\n`;

/** Objects and arrays nested this deep are refused: JSON.stringify, which digests use, exhausts the stack far below what JSON.parse reads. */
const MAX_NESTING = 64;

/** Whether `value` nests objects and arrays MAX_NESTING deep or more (checked without recursion). */
function nestsTooDeep(value: unknown): boolean {
  const stack: [unknown, number][] = [[value, 0]];
  for (let top = stack.pop(); top; top = stack.pop()) {
    const [v, depth] = top;
    if (v === null || typeof v !== "object") continue;
    if (depth >= MAX_NESTING) return true;
    for (const child of Object.values(v))
      if (child !== null && typeof child === "object") stack.push([child, depth + 1]);
  }
  return false;
}

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => v !== null && typeof v === "object" && !Array.isArray(v);
const isIndex = (v: unknown): v is number =>
  Number.isInteger(v) && (v as number) >= 0 && (v as number) < MAX_INDEX;
const optional = (v: unknown, type: "string" | "object" | "array") =>
  v === undefined ||
  v === null ||
  (type === "array" ? Array.isArray(v) : type === "object" ? isObject(v) : typeof v === type);

/**
 * Why `chunk` is not a chat-completion chunk the assembler can take, or undefined when it is one: an
 * object whose `choices` is an array of objects with an index below MAX_INDEX and a `delta` object, whose
 * text fields are strings and whose tool calls have an index too.
 */
export function chunkProblem(chunk: unknown): string | undefined {
  if (!isObject(chunk)) return "not a JSON object";
  if (nestsTooDeep(chunk)) return `it nests ${MAX_NESTING} levels deep or more`;
  if (!Array.isArray(chunk.choices)) return "no choices array";
  if (!optional(chunk.usage, "object")) return "usage is not an object";
  for (const [i, c] of chunk.choices.entries()) {
    const at = `choices[${i}]`;
    if (!isObject(c)) return `${at} is not an object`;
    if (!isIndex(c.index)) return `${at}.index is not an integer from 0 to ${MAX_INDEX - 1}`;
    if (!optional(c.finish_reason, "string")) return `${at}.finish_reason is not a string`;
    const d = c.delta;
    if (!isObject(d)) return `${at}.delta is not an object`;
    for (const f of ["role", "content", "refusal"])
      if (!optional(d[f], "string")) return `${at}.delta.${f} is not a string`;
    if (!optional(d.tool_calls, "array")) return `${at}.delta.tool_calls is not an array`;
    for (const [j, t] of ((d.tool_calls as unknown[] | null) ?? []).entries()) {
      const tat = `${at}.delta.tool_calls[${j}]`;
      if (!isObject(t) || !isIndex(t.index)) return `${tat} has no index from 0 to ${MAX_INDEX - 1}`;
      if (!optional(t.id, "string") || !optional(t.type, "string"))
        return `${tat}.id or .type is not a string`;
      if (!optional(t.function, "object")) return `${tat}.function is not an object`;
      const fn = (t.function ?? {}) as Json;
      if (!optional(fn.name, "string") || !optional(fn.arguments, "string"))
        return `${tat}.function.name or .arguments is not a string`;
    }
  }
  return undefined;
}

interface ToolCall {
  id?: string;
  type?: string;
  name: string;
  arguments: string[];
}

interface Choice {
  role?: string;
  content?: string[];
  refusal?: string[];
  tools: Map<number, ToolCall>;
  finish: string | null;
}

/** The fields of a chunk that carry over to the message; a later chunk's value replaces an earlier one's. */
const HEAD_FIELDS = ["id", "created", "model", "system_fingerprint", "service_tier"] as const;

/**
 * The chat.completion a stream's chunks stand for, by the rules OpenAI's SDK assembles one with: the
 * last id, created, model, system_fingerprint and service_tier; per choice the last role, the content
 * and refusal joined in order, each tool call's last id, type and name and its arguments joined, the
 * last finish_reason; the last usage. Log probabilities are left out (they are in the body the receipt
 * digests): kept whole, a stream of them would hold many times its own size in memory.
 */
export class ChatAssembler {
  private readonly choices = new Map<number, Choice>();
  private readonly head: Json = {};
  private usage: unknown;
  chunks = 0;

  /** Takes a chunk that chunkProblem() found nothing wrong with. */
  add(chunk: Json): void {
    this.chunks++;
    for (const f of HEAD_FIELDS) if (chunk[f] !== undefined && chunk[f] !== null) this.head[f] = chunk[f];
    if (isObject(chunk.usage)) this.usage = chunk.usage;
    for (const c of chunk.choices as Json[]) {
      const index = c.index as number;
      let choice = this.choices.get(index);
      if (!choice) {
        choice = { tools: new Map(), finish: null };
        this.choices.set(index, choice);
      }
      const d = c.delta as Json;
      if (typeof d.role === "string" && d.role) choice.role = d.role;
      if (typeof d.content === "string") {
        choice.content ??= [];
        choice.content.push(d.content);
      }
      if (typeof d.refusal === "string" && d.refusal) {
        choice.refusal ??= [];
        choice.refusal.push(d.refusal);
      }
      for (const t of (d.tool_calls as Json[] | null) ?? []) {
        let call = choice.tools.get(t.index as number);
        if (!call) {
          call = { name: "", arguments: [] };
          choice.tools.set(t.index as number, call);
        }
        if (typeof t.id === "string" && t.id) call.id = t.id;
        if (typeof t.type === "string" && t.type) call.type = t.type;
        const fn = (t.function ?? {}) as Json;
        if (typeof fn.name === "string" && fn.name) call.name = fn.name;
        if (typeof fn.arguments === "string") call.arguments.push(fn.arguments);
      }
      if (typeof c.finish_reason === "string" && c.finish_reason) choice.finish = c.finish_reason;
    }
  }

  message(): Json {
    const byIndex = [...this.choices.entries()].sort(([a], [b]) => a - b);
    return {
      ...this.head,
      object: "chat.completion",
      choices: byIndex.map(([index, c]) => ({
        index,
        message: {
          role: c.role ?? "assistant",
          content: c.content ? c.content.join("") : null,
          ...(c.refusal ? { refusal: c.refusal.join("") } : {}),
          ...(c.tools.size
            ? {
                tool_calls: [...c.tools.entries()]
                  .sort(([a], [b]) => a - b)
                  .map(([, t]) => ({
                    ...(t.id !== undefined ? { id: t.id } : {}),
                    type: t.type ?? "function",
                    function: { name: t.name, arguments: t.arguments.join("") },
                  })),
              }
            : {}),
        },
        finish_reason: c.finish,
      })),
      ...(this.usage !== undefined ? { usage: this.usage } : {}),
    };
  }

  /** The digest a receipt records: of the assembled message as compact JSON. */
  digest(): BodyDigest {
    return bodyDigest(JSON.stringify(this.message()));
  }
}

/** What a streamed receipt records of its stream (docs/notary.md, "Streamed receipts"). */
export interface StreamRecord {
  /** The identifier the caller was given in Svc-Stream-ID before the stream started. */
  id: string;
  /** Chat-completion chunks forwarded. */
  chunks: number;
  /** How the stream ended: done, closed, or the reason it was cut short. */
  end: string;
  /** The chunks assembled (ChatAssembler), as compact JSON. */
  message: BodyDigest;
}

/**
 * Reads a streamed response body as the caller received it and assembles its chunks as the proxy did;
 * throws SvcError("receipt") when the count or the assembled message differ from `record`, or when the
 * body has what the proxy never passes on (an event with a type, one after `[DONE]`). The proxy's own
 * error events and `[DONE]` are not chunks; comments are not events.
 */
export function checkStreamedBody(body: Uint8Array, record: StreamRecord): void {
  const bad = (why: string) => new SvcError("receipt", `receipt verification failed: ${why}`);
  const assembler = new ChatAssembler();
  let problem: string | undefined;
  let done = false;
  const reader = new SseReader({
    event(e) {
      const kind = eventKind(e);
      if (problem || kind === "error") return;
      const n = assembler.chunks + 1;
      if (done) problem = `the response has an event after ${DONE}`;
      else if (kind === "done") done = true;
      else if (kind === "typed")
        problem = `event ${n} of the response has the type ${JSON.stringify(e.event)}`;
      if (problem || done) return;
      let chunk: unknown;
      try {
        chunk = JSON.parse(e.data);
      } catch {
        problem = `event ${n} of the response is not JSON`;
        return;
      }
      problem = chunkProblem(chunk);
      if (problem) problem = `event ${n} of the response is not a chat-completion chunk: ${problem}`;
      else assembler.add(chunk as Json);
    },
  });
  if (!reader.feed(body)) throw bad(reader.overLimit);
  reader.end();
  if (problem) throw bad(problem);
  if (assembler.chunks !== record.chunks)
    throw bad(`the response has ${assembler.chunks} chunks, the receipt records ${record.chunks}`);
  const d = assembler.digest();
  if (d.sha256 !== record.message.sha256 || d.length !== record.message.length)
    throw bad(
      `the message assembled from the response's events (${d.length} bytes sha256 ${d.sha256}) is not the one the receipt records (${record.message.length} bytes sha256 ${record.message.sha256})`,
    );
}
