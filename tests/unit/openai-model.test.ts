import { describe, expect, test } from "bun:test";
import { applyModel, MAX_DEPTH, REQUEST_MODEL, RESPONSE_MODEL } from "../../proxy/middleware/openai-model.ts";

describe("the chat-completions model of the openai middleware", () => {
  test("keeps known request fields, in arrays and nested objects, and lists what it removed", () => {
    const removed: string[] = [];
    const out = applyModel(
      {
        model: "m",
        temperature: 0.2,
        messages: [
          { role: "system", content: "be brief", secret: 1 },
          { role: "user", content: [{ type: "text", text: "hi", extra: true }] },
        ],
        tools: [{ type: "function", function: { name: "f", parameters: { type: "object", anything: 1 } } }],
        unknown_top: { a: 1 },
      },
      REQUEST_MODEL,
      removed,
    );
    expect(out).toEqual({
      model: "m",
      temperature: 0.2,
      messages: [
        { role: "system", content: "be brief" },
        { role: "user", content: [{ type: "text", text: "hi" }] },
      ],
      tools: [{ type: "function", function: { name: "f", parameters: { type: "object", anything: 1 } } }],
    });
    expect(removed).toEqual(["messages[0].secret", "messages[1].content[0].extra", "unknown_top"]);
  });

  test("keeps a response as the API defines it and drops anything else", () => {
    const removed: string[] = [];
    const response = {
      id: "c1",
      object: "chat.completion",
      created: 1,
      model: "m",
      choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content: "x", debug: 1 } }],
      usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2, cost: 3 },
      internal: true,
    };
    const out = applyModel(response, RESPONSE_MODEL, removed) as typeof response;
    expect(removed).toEqual(["choices[0].message.debug", "usage.cost", "internal"]);
    expect(out.choices[0]?.message as object).toEqual({ role: "assistant", content: "x" });
  });

  test("a __proto__ key is treated as unknown, not as the model's prototype", () => {
    const removed: string[] = [];
    const out = applyModel(JSON.parse('{"model":"m","__proto__":{"polluted":1}}'), REQUEST_MODEL, removed);
    expect(removed).toEqual(["__proto__"]);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(Object.keys(out as object)).toEqual(["model"]);
  });

  test("arrays nested deeper than the limit are refused (undefined), not walked until the stack runs out", () => {
    const nested = (depth: number) => JSON.parse(`{"messages":${"[".repeat(depth)}${"]".repeat(depth)}}`);
    expect(applyModel(nested(100_000), REQUEST_MODEL)).toBeUndefined();
    // The body is level 0, `messages` level 1: the innermost of 63 arrays is at 63, the last level served.
    expect(applyModel(nested(MAX_DEPTH - 1), REQUEST_MODEL)).toEqual(nested(MAX_DEPTH - 1));
    expect(applyModel(nested(MAX_DEPTH), REQUEST_MODEL)).toBeUndefined();
    // Under a field kept whole (a tool's JSON Schema), depth is not walked and not limited.
    const schema = JSON.parse(`${'{"a":'.repeat(200)}1${"}".repeat(200)}`);
    const tools = [{ type: "function", function: { name: "f", parameters: schema } }];
    expect(applyModel({ tools }, REQUEST_MODEL)).toEqual({ tools });
  });
});
