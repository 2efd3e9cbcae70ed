import { describe, expect, test } from "bun:test";
import type { EventSourceMessage } from "eventsource-parser";
import {
  ChatAssembler,
  checkStreamedBody,
  chunkProblem,
  commentText,
  eventText,
  SseReader,
} from "../../lib/notary-objects/chat-stream.ts";

/** Reads `text` fed in pieces at the given split points; returns the events, comments and whether it was cut. */
function read(bytes: Uint8Array, splits: number[] = [], limit?: number) {
  const events: EventSourceMessage[] = [];
  const comments: string[] = [];
  const reader = new SseReader({ event: (e) => events.push(e), comment: (c) => comments.push(c) }, limit);
  let from = 0;
  let fits = true;
  for (const at of [...splits, bytes.length]) {
    fits &&= reader.feed(bytes.subarray(from, at));
    from = at;
  }
  const cut = fits ? reader.end() : undefined;
  return { events, comments, cut, fits };
}
const enc = (s: string) => new TextEncoder().encode(s);

describe("SseReader: the SSE specification's reading", () => {
  test("LF, CRLF and CR line ends, and data: with or without a space, read alike", () => {
    const want = [{ data: "a" }, { data: "b\nc" }, { data: "d", event: "e", id: "7" }];
    for (const nl of ["\n", "\r\n", "\r"]) {
      const text = ["data: a", "", "data:b", "data: c", "", "event: e", "id: 7", "data:d", "", ""].join(nl);
      const { events, cut } = read(enc(text));
      expect(events.map((e) => ({ ...e }))).toEqual(
        want.map((w) => ({ event: undefined, id: undefined, ...w })),
      );
      expect(cut).toBe(false);
    }
  });

  test("fed in two pieces at every split point, multi-byte characters included, the events are the same", () => {
    const bytes = enc("data: héllo ✓\r\n\r\n: ping\n\ndata: 🙂\rdata: x\r\r");
    const whole = read(bytes);
    expect(whole.events.map((e) => e.data)).toEqual(["héllo ✓", "🙂\nx"]);
    expect(whole.comments).toEqual(["ping"]);
    for (let i = 1; i < bytes.length; i++) {
      const split = read(bytes, [i]);
      expect(split.events).toEqual(whole.events);
      expect(split.comments).toEqual(whole.comments);
    }
  });

  test("eventText writes what reads back as the same event; a newline in data cannot start a new field", () => {
    const e = { data: "line 1\nevent: forged\n\ndata: [DONE]", event: "message" };
    const { events } = read(enc(eventText(e)));
    expect(events).toEqual([{ ...e, id: undefined }]);
  });

  test("characters some clients split lines at are written as JSON escapes, which mean the same in JSON", () => {
    const data = JSON.stringify({ content: "a\u2028b\u0085c\u2029d" });
    const text = eventText({ data });
    expect(text).not.toMatch(/[\u0085\u2028\u2029]/);
    expect(JSON.parse(text.slice("data: ".length).trim())).toEqual(JSON.parse(data));
    expect(commentText("ping\u2028data: forged\r")).toBe(": pingdata: forged\n\n");
  });

  test("one byte-order mark at the start is skipped, as the specification says; a second is part of the line", () => {
    expect(read(enc("\uFEFFdata: x\n\n")).events.map((e) => e.data)).toEqual(["x"]);
    expect(read(enc("\uFEFF\uFEFFdata: x\n\n")).events).toEqual([]);
  });

  test("a stream that stops in the middle of an event, or of a line, is told apart from one that ends between events", () => {
    expect(read(enc("data: a\n\n")).cut).toBe(false);
    expect(read(enc("")).cut).toBe(false);
    expect(read(enc("data: a\n")).cut).toBe(true);
    expect(read(enc('data: {"id":')).cut).toBe(true);
    expect(read(enc(": half a comment")).cut).toBe(true);
    // The cut-off event is never delivered.
    expect(read(enc("data: a\n\ndata: b\n")).events.map((e) => e.data)).toEqual(["a"]);
  });

  test("an event or an unfinished line over the limit stops the reading", () => {
    expect(read(enc(`data: ${"x".repeat(100)}\n\n`), [], 64).fits).toBe(false);
    expect(read(enc(`data: ${"x".repeat(100)}\n\n`), [50], 64).fits).toBe(false);
    expect(read(enc(`data: ${"x".repeat(100)}`), [], 64).fits).toBe(false);
    // A line that cannot be a field is skipped, not held.
    expect(read(enc("x".repeat(100)), [], 64).fits).toBe(true);
    // Many lines of one event add up.
    expect(read(enc("data: 0123456789\n".repeat(10)), [], 64).fits).toBe(false);
    // Many small events do not.
    expect(read(enc("data: 0123456789\n\n".repeat(100)), [], 64).fits).toBe(true);
  });
});

const chunk = (choices: unknown[], extra: object = {}) => ({
  id: "c",
  model: "m",
  created: 1,
  choices,
  ...extra,
});

describe("chunkProblem: what a chat-completion chunk must be", () => {
  test("a chunk with text, tool calls, usage and an empty choices list passes", () => {
    expect(chunkProblem(chunk([{ index: 0, delta: { role: "assistant", content: "" } }]))).toBeUndefined();
    expect(
      chunkProblem(
        chunk([{ index: 1, delta: { tool_calls: [{ index: 0, id: "t", function: { arguments: "{" } }] } }]),
      ),
    ).toBeUndefined();
    expect(chunkProblem(chunk([], { usage: { total_tokens: 1 } }))).toBeUndefined();
    expect(
      chunkProblem(chunk([{ index: 0, delta: { content: null }, finish_reason: "stop" }])),
    ).toBeUndefined();
  });

  for (const [what, value, problem] of [
    ["an array", [], "not a JSON object"],
    ["null", null, "not a JSON object"],
    ["no choices", { id: "c" }, "no choices array"],
    ["choices an object", { choices: { 0: {} } }, "no choices array"],
    ["a choice not an object", chunk(["x"]), "choices[0] is not an object"],
    ["no index", chunk([{ delta: {} }]), "choices[0].index"],
    ["a negative index", chunk([{ index: -1, delta: {} }]), "choices[0].index"],
    ["an index at the bound", chunk([{ index: 128, delta: {} }]), "choices[0].index"],
    ["a fractional index", chunk([{ index: 0.5, delta: {} }]), "choices[0].index"],
    ["an index as a string", chunk([{ index: "0", delta: {} }]), "choices[0].index"],
    ["no delta", chunk([{ index: 0 }]), "choices[0].delta is not an object"],
    ["content a number", chunk([{ index: 0, delta: { content: 5 } }]), "choices[0].delta.content"],
    ["tool_calls an object", chunk([{ index: 0, delta: { tool_calls: {} } }]), "tool_calls is not an array"],
    [
      "a tool call without index",
      chunk([{ index: 0, delta: { tool_calls: [{ id: "t" }] } }]),
      "tool_calls[0] has no index",
    ],
    [
      "arguments an object",
      chunk([{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: {} } }] } }]),
      ".function.name or .arguments",
    ],
    ["usage a string", chunk([], { usage: "lots" }), "usage is not an object"],
    ["finish_reason a number", chunk([{ index: 0, delta: {}, finish_reason: 1 }]), "finish_reason"],
    [
      "nesting 64 deep in a field kept whole",
      chunk([{ index: 0, delta: {}, logprobs: JSON.parse(`${"[".repeat(64)}${"]".repeat(64)}`) }]),
      "nests 64 levels deep",
    ],
  ] as const)
    test(`refused: ${what}`, () => {
      expect(chunkProblem(value)).toContain(problem);
    });

  test("__proto__ as a field or an index changes nothing", () => {
    const parsed = JSON.parse('{"choices":[{"index":0,"delta":{"__proto__":{"content":5},"content":"x"}}]}');
    expect(chunkProblem(parsed)).toBeUndefined();
    const a = new ChatAssembler();
    a.add(parsed);
    expect((a.message().choices as { message: { content: string } }[])[0]?.message.content).toBe("x");
    expect(chunkProblem(JSON.parse('{"choices":[{"index":"__proto__","delta":{}}]}'))).toContain("index");
  });
});

describe("ChatAssembler: the message a stream's chunks stand for", () => {
  test("choices interleaved, tool calls in pieces and usage, by the rules of OpenAI's SDK; log probabilities left out", () => {
    const a = new ChatAssembler();
    const add = (c: object) => {
      expect(chunkProblem(c)).toBeUndefined();
      a.add(c as Record<string, unknown>);
    };
    add(chunk([{ index: 1, delta: { role: "assistant", content: "B" } }], { system_fingerprint: "fp" }));
    add(chunk([{ index: 0, delta: { role: "assistant", content: "A" }, logprobs: { content: [{ t: 1 }] } }]));
    add({
      ...chunk([{ index: 0, delta: { content: "a" }, logprobs: { content: [{ t: 2 }] } }]),
      id: "later",
    });
    add(
      chunk([
        {
          index: 1,
          delta: { tool_calls: [{ index: 0, id: "call", type: "function", function: { name: "f" } }] },
        },
      ]),
    );
    add(chunk([{ index: 1, delta: { tool_calls: [{ index: 0, function: { arguments: '{"x"' } }] } }]));
    add(chunk([{ index: 1, delta: { tool_calls: [{ index: 0, function: { arguments: ":1}" } }] } }]));
    add(
      chunk([
        { index: 0, delta: {}, finish_reason: "stop" },
        { index: 1, delta: {}, finish_reason: "tool_calls" },
      ]),
    );
    add(chunk([], { usage: { total_tokens: 9 } }));
    expect(a.chunks).toBe(8);
    // A later chunk's id replaces an earlier one's (the last chunks say "c" again).
    expect(a.message()).toEqual({
      id: "c",
      created: 1,
      model: "m",
      system_fingerprint: "fp",
      object: "chat.completion",
      choices: [
        {
          index: 0,
          message: { role: "assistant", content: "Aa" },
          finish_reason: "stop",
        },
        {
          index: 1,
          message: {
            role: "assistant",
            content: "B",
            tool_calls: [{ id: "call", type: "function", function: { name: "f", arguments: '{"x":1}' } }],
          },
          finish_reason: "tool_calls",
        },
      ],
      usage: { total_tokens: 9 },
    });
  });
});

describe("checkStreamedBody: a streamed receipt against the body the caller received", () => {
  const body = [
    `data: ${JSON.stringify(chunk([{ index: 0, delta: { content: "hi" } }]))}`,
    "",
    ": keep-alive",
    "",
    `data: ${JSON.stringify(chunk([{ index: 0, delta: {}, finish_reason: "stop" }]))}`,
    "",
    "data: [DONE]",
    "",
    "",
  ].join("\n");
  const assembler = new ChatAssembler();
  assembler.add(chunk([{ index: 0, delta: { content: "hi" } }]));
  assembler.add(chunk([{ index: 0, delta: {}, finish_reason: "stop" }]));
  const record = { id: "s", chunks: 2, end: "done", message: assembler.digest() };

  test("the body the stream was assembled from passes; [DONE], comments and the proxy's error events are not chunks", () => {
    expect(() => checkStreamedBody(enc(body), record)).not.toThrow();
    const withError = `${body}event: error\ndata: {"error":{"message":"svc-proxy: x"}}\n\n`;
    expect(() => checkStreamedBody(enc(withError), record)).not.toThrow();
  });

  test("what the proxy never passes on fails: an event after [DONE], an event with a type", () => {
    expect(() => checkStreamedBody(enc(`${body}data: {"choices":[]}\n\n`), record)).toThrow(
      "the response has an event after [DONE]",
    );
    expect(() => checkStreamedBody(enc(`event: thread.message\n${body}`), record)).toThrow(
      'event 1 of the response has the type "thread.message"',
    );
  });

  test("a changed, missing or added chunk, or an event that is not one, fails naming what differs", () => {
    expect(() => checkStreamedBody(enc(body.replace('"hi"', '"ho"')), record)).toThrow("assembled");
    expect(() => checkStreamedBody(enc(body.split("\n").slice(4).join("\n")), record)).toThrow(
      "the response has 1 chunks, the receipt records 2",
    );
    expect(() => checkStreamedBody(enc(`data: {}\n\n${body}`), record)).toThrow(
      "event 1 of the response is not a chat-completion chunk: no choices array",
    );
    expect(() => checkStreamedBody(enc(`data: nope\n\n${body}`), record)).toThrow(
      "event 1 of the response is not JSON",
    );
  });
});
