/**
 * Reading fields of an object that came from a request or a peer (a review's object, a manifest): each
 * step checks what it finds, so that a field of the wrong type reads as absent, never as a crash.
 */
export type Obj = Record<string, unknown>;

export const isObj = (v: unknown): v is Obj => v !== null && typeof v === "object" && !Array.isArray(v);

/** The value at `path`, own properties only (`__proto__` is a name like any other); undefined when absent. */
export const get = (o: unknown, ...path: string[]): unknown => {
  let node = o;
  for (const key of path) node = isObj(node) && Object.hasOwn(node, key) ? node[key] : undefined;
  return node;
};

export const list = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);

/** A non-empty string, else undefined. */
export const str = (v: unknown) => (typeof v === "string" && v !== "" ? v : undefined);
