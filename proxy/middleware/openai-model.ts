/**
 * The model of the chat-completions API that the openai middleware keeps (docs/openai.md, "The model",
 * lists it): any field not named here is removed from requests and responses. `true` keeps a value as it
 * is; an object keeps the named fields of an object, or of each object in an array.
 */
export type FieldModel = true | { [field: string]: FieldModel };

const toolCall = { id: true, type: true, function: { name: true, arguments: true } } satisfies FieldModel;

const contentPart: FieldModel = {
  type: true,
  text: true,
  refusal: true,
  image_url: { url: true, detail: true },
  input_audio: { data: true, format: true },
  file: { file_data: true, file_id: true, filename: true },
};

export const REQUEST_MODEL: FieldModel = {
  model: true,
  messages: {
    role: true,
    content: contentPart,
    name: true,
    refusal: true,
    tool_calls: toolCall,
    tool_call_id: true,
    audio: { id: true },
  },
  audio: true,
  frequency_penalty: true,
  logit_bias: true,
  logprobs: true,
  max_completion_tokens: true,
  max_tokens: true,
  metadata: true,
  modalities: true,
  n: true,
  parallel_tool_calls: true,
  prediction: true,
  presence_penalty: true,
  reasoning_effort: true,
  response_format: true,
  seed: true,
  service_tier: true,
  stop: true,
  store: true,
  stream: true,
  stream_options: true,
  temperature: true,
  tool_choice: true,
  tools: { type: true, function: { name: true, description: true, parameters: true, strict: true } },
  top_logprobs: true,
  top_p: true,
  user: true,
};

const usage: FieldModel = {
  prompt_tokens: true,
  completion_tokens: true,
  total_tokens: true,
  prompt_tokens_details: true,
  completion_tokens_details: true,
};

/** What a whole answer and each chunk of a streamed one share. */
const completion = {
  id: true,
  object: true,
  created: true,
  model: true,
  service_tier: true,
  system_fingerprint: true,
  usage,
} satisfies FieldModel;
const choice = { index: true, finish_reason: true, logprobs: true } satisfies FieldModel;

export const RESPONSE_MODEL: FieldModel = {
  ...completion,
  choices: {
    ...choice,
    message: {
      role: true,
      content: true,
      refusal: true,
      tool_calls: toolCall,
      annotations: true,
      audio: true,
    },
  },
};

/** One event of a streamed answer (`"stream": true`): a chat.completion.chunk. */
export const CHUNK_MODEL: FieldModel = {
  ...completion,
  choices: {
    ...choice,
    delta: {
      role: true,
      content: true,
      refusal: true,
      tool_calls: { index: true, ...toolCall },
    },
  },
};

/** An error a target sends in the middle of a stream. */
export const ERROR_MODEL: FieldModel = { error: { message: true, type: true, param: true, code: true } };

/**
 * Arrays nested in arrays are walked with the model of their parent: at this depth (objects and arrays
 * counted from the body), a body is refused (no message of the API nests so; a body of 100,000 arrays
 * would exhaust the stack).
 */
export const MAX_DEPTH = 64;

/**
 * Applies a model; `removed` lists the paths of the fields taken out (`messages[0].foo`). Returns
 * undefined when the value nests deeper than MAX_DEPTH where the model walks it.
 */
export function applyModel(value: unknown, model: FieldModel, removed: string[] = []): unknown {
  try {
    return walk(value, model, "", removed, 0);
  } catch (e) {
    if (e === TOO_DEEP) return undefined;
    throw e;
  }
}

const TOO_DEEP = Symbol("too deep");

function walk(value: unknown, model: FieldModel, path: string, removed: string[], depth: number): unknown {
  if (model === true || value === null || typeof value !== "object") return value;
  if (depth >= MAX_DEPTH) throw TOO_DEEP;
  // Paths are made only for what is walked or removed: every event of a stream passes here.
  if (Array.isArray(value))
    return value.map((v, i) =>
      v === null || typeof v !== "object" ? v : walk(v, model, `${path}[${i}]`, removed, depth + 1),
    );
  const out: Record<string, unknown> = {};
  const fields = value as Record<string, unknown>;
  for (const k of Object.keys(fields)) {
    const sub = Object.hasOwn(model, k) ? model[k] : undefined;
    const v = fields[k];
    if (sub === undefined) removed.push(path ? `${path}.${k}` : k);
    else if (sub === true || v === null || typeof v !== "object") out[k] = v;
    else out[k] = walk(v, sub, path ? `${path}.${k}` : k, removed, depth + 1);
  }
  return out;
}
