/**
 * Paths of fields the schema does not know. They are ignored, but a misspelt `source.spiffe_ids` silently
 * allows every peer, so the proxy warns about each one (docs/proxy-configuration.md, "Warnings").
 */
interface SchemaNode {
  type: string;
  entries?: Record<string, SchemaNode>;
  wrapped?: SchemaNode;
  item?: SchemaNode;
  key?: string;
  options?: SchemaNode[];
}

const isObject = (x: unknown): x is Record<string, unknown> =>
  typeof x === "object" && x !== null && !Array.isArray(x);

export function unknownFields(schema: unknown, input: unknown, path = ""): string[] {
  const node = schema as SchemaNode;
  if (node.type === "optional" || node.type === "nullable")
    return node.wrapped ? unknownFields(node.wrapped, input, path) : [];
  if (node.type === "array" && Array.isArray(input) && node.item) {
    return input.flatMap((item, i) => unknownFields(node.item, item, `${path}[${i}]`));
  }
  if (node.type === "variant" && isObject(input) && node.key && node.options) {
    const option = node.options.find((o) => {
      const lit = o.entries?.[node.key as string] as { literal?: unknown } | undefined;
      return lit?.literal === input[node.key as string];
    });
    return option ? unknownFields(option, input, path) : [];
  }
  if (node.type === "object" && isObject(input) && node.entries) {
    const entries = node.entries;
    return Object.keys(input).flatMap((k) => {
      const child = `${path ? `${path}.` : ""}${k}`;
      return k in entries ? unknownFields(entries[k], input[k], child) : [child];
    });
  }
  return [];
}
