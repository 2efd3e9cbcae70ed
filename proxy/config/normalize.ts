/**
 * The parts of a configuration document that the rules (rules.ts) run on. When the whole document does
 * not parse, each section and each listener is parsed on its own, and a listener's malformed optional
 * fields are left out, so that the rules relating fields still run wherever they can: every problem is
 * reported at once. Also fills in what an empty value stands for.
 */
import * as v from "valibot";
import {
  Config,
  type ConfigInput,
  DEFAULT_METRICS_ADDR,
  Listener,
  type ListenerInput,
  Middleware,
} from "./schema.ts";

/** The sections (and listeners, with their indexes) that have the right shape. */
export interface Parts {
  spiffe?: ConfigInput["spiffe"];
  metricsAddr?: string;
  keylog?: string;
  notary?: ConfigInput["notary"];
  witness?: ConfigInput["witness"];
  admission?: ConfigInput["admission"];
  /**
   * Index in the document, the listener, where its middlewares stood when some were left out, and its
   * essential fields that are malformed (stand-ins take their place; the rules that need them are skipped).
   */
  listeners: [number, ListenerInput, number[]?, Set<Essential>?][];
}

/** The document as an object whose fields can be looked at, whatever it is. */
export function documentOf(raw: unknown): Record<string, unknown> {
  return (typeof raw === "object" && raw !== null ? raw : {}) as Record<string, unknown>;
}

export function partsOf(parsed: v.SafeParseResult<typeof Config>, raw: unknown): Parts {
  const parts: Parts = parsed.success
    ? { ...parsed.output, listeners: parsed.output.listeners.map((l, i): [number, ListenerInput] => [i, l]) }
    : wellFormedParts(raw);
  // An empty metricsAddr means the default address.
  if (parts.metricsAddr === "") parts.metricsAddr = DEFAULT_METRICS_ADDR;
  return parts;
}

function wellFormedParts(raw: unknown): Parts {
  const doc = documentOf(raw);
  const parts: Parts = { listeners: [] };
  const section = <T>(schema: v.GenericSchema<unknown, T>, value: unknown): T | undefined => {
    const r = v.safeParse(schema, value);
    return r.success ? r.output : undefined;
  };
  parts.spiffe = section(Config.entries.spiffe, doc.spiffe);
  parts.metricsAddr = section(Config.entries.metricsAddr, doc.metricsAddr);
  parts.keylog = section(Config.entries.keylog, doc.keylog);
  parts.notary = section(Config.entries.notary, doc.notary);
  parts.witness = section(Config.entries.witness, doc.witness);
  parts.admission = section(Config.entries.admission, doc.admission);
  if (Array.isArray(doc.listeners)) {
    doc.listeners.forEach((item, i) => {
      const whole = section(Listener, item);
      if (whole) {
        parts.listeners.push([i, whole]);
        return;
      }
      const malformed = new Set<Essential>();
      const l = section(Listener, repaired(item, malformed));
      const listed = (item as { middlewares?: unknown } | null)?.middlewares;
      const positions = Array.isArray(listed)
        ? listed.flatMap((m, k) => (v.is(Middleware, m) ? [k] : []))
        : undefined;
      if (l) parts.listeners.push([i, l, positions, malformed]);
    });
  }
  return parts;
}

/**
 * The fields other rules depend on. One that is malformed gets a stand-in, so that the rules needing only
 * the other fields (names, addresses, patterns, timeouts) still run; the rules that read it are skipped
 * (rules.ts, listenerConfigs).
 */
const ESSENTIAL = {
  name: "(malformed)",
  address: ":0",
  mode: "client",
  protocol: "http",
  target: { url: "http://stand-in" },
} as const;
export type Essential = keyof typeof ESSENTIAL;

/**
 * A listener whose malformed optional fields are left out (so their defaults apply) and whose malformed
 * middlewares and SPIFFE ID lists are dropped, so that the rules relating its other fields still run. The
 * schema has reported what was left out; this only keeps it from hiding the rest. Malformed essential
 * fields are stood in for, and added to `malformed`.
 */
function repaired(item: unknown, malformed: Set<Essential>): unknown {
  if (typeof item !== "object" || item === null || Array.isArray(item)) return item;
  const out: Record<string, unknown> = { ...item };
  for (const [key, entry] of Object.entries(Listener.entries)) {
    const value = out[key];
    if (v.is(entry, value)) continue;
    if (key === "middlewares" && Array.isArray(value)) {
      out[key] = value.filter((m) => v.is(Middleware, m));
      continue;
    }
    if (typeof value === "object" && value !== null && !Array.isArray(value)) {
      // timeouts, source, target, connection: keep the sub-fields that are well formed.
      const inner = { ...(value as Record<string, unknown>) };
      const schema = (entry as { wrapped?: v.ObjectSchema<v.ObjectEntries, undefined> }).wrapped ?? entry;
      const entries = (schema as v.ObjectSchema<v.ObjectEntries, undefined>).entries ?? {};
      for (const [sub, subSchema] of Object.entries(entries)) {
        if (!v.is(subSchema as v.GenericSchema, inner[sub])) delete inner[sub];
      }
      out[key] = inner;
      if (v.is(entry, inner)) continue;
    }
    if (Object.hasOwn(ESSENTIAL, key)) {
      out[key] = ESSENTIAL[key as Essential];
      malformed.add(key as Essential);
    } else delete out[key];
  }
  return out;
}
