/**
 * User info larger than any the API server sends is refused before anything is asked, hashed or logged
 * for it (docs/admission.md, "The webhook under load and attack"); judging it reads a bounded part of it.
 */

/**
 * JSON.stringify(v), read no further than needed: the whole text when it has at most `max` characters,
 * else its first `max + 1` characters (so that a caller cutting at `max` knows it was cut). undefined
 * where JSON.stringify gives undefined. For values read from JSON (no toJSON, no cycles).
 */
export function boundedJson(v: unknown, max: number): string | undefined {
  if (v === undefined || typeof v === "function" || typeof v === "symbol") return undefined;
  let out = "";
  // Each call appends; false once more than `max` characters are out (the walk then stops).
  const put = (s: string): boolean => {
    out += s;
    return out.length <= max;
  };
  const walk = (x: unknown): boolean => {
    if (typeof x === "string") {
      // Escaping never shortens: `room + 1` characters of the string give more than `room` of its JSON.
      const room = max - out.length + 1;
      return put(JSON.stringify(x.length > room ? x.slice(0, room) : x));
    }
    if (x === null || typeof x !== "object") return put(JSON.stringify(x) ?? "null");
    if (Array.isArray(x)) {
      if (!put("[")) return false;
      for (let i = 0; i < x.length; i++) {
        if (i > 0 && !put(",")) return false;
        const e = x[i];
        if (!(e === undefined || typeof e === "function" || typeof e === "symbol" ? put("null") : walk(e)))
          return false;
      }
      return put("]");
    }
    if (!put("{")) return false;
    let first = true;
    for (const k in x) {
      if (!Object.hasOwn(x, k)) continue;
      const e = (x as Record<string, unknown>)[k];
      if (e === undefined || typeof e === "function" || typeof e === "symbol") continue;
      if (!first && !put(",")) return false;
      first = false;
      if (!walk(k) || !put(":") || !walk(e)) return false;
    }
    return put("}");
  };
  walk(v);
  return out.length > max ? out.slice(0, max + 1) : out;
}

/**
 * Bounds on a review's userInfo. The API server copies it from the authenticator: a user in a few hundred
 * groups with names of a few hundred characters is plausible, a few thousand groups or megabyte strings
 * are not. Above these, deciding would cost more than the marks decided (an override check forwards the
 * groups and extra to the API server, whose RBAC reads every group against every binding).
 */
export const USER_INFO_LIMITS = {
  /** Entries of `groups`. */
  groups: 1000,
  /** Keys of `extra`. */
  extraKeys: 64,
  /** Values of `extra`, all keys together. */
  extraValues: 1000,
  /** Characters of any one string: the user name, uid, a group, an extra key or value. */
  string: 16 * 1024,
  /** Characters of the whole userInfo as JSON. */
  total: 128 * 1024,
};

/**
 * Why a review's userInfo is larger than any the API server sends, or undefined when it is not. Reads at
 * most a bounded part of it. Only sizes are judged: a value of the wrong type is left to the review, which
 * reads every field for its type.
 */
export function userInfoProblem(user: unknown, limits = USER_INFO_LIMITS): string | undefined {
  if (user === null || typeof user !== "object") return undefined;
  const u = user as Record<string, unknown>;
  const tooLong = (what: string, s: unknown) =>
    typeof s === "string" && s.length > limits.string
      ? `${what} has ${s.length} characters (at most ${limits.string})`
      : undefined;
  const problem = (): string | undefined => {
    const name = tooLong("the user name", u.username) ?? tooLong("the uid", u.uid);
    if (name) return name;
    if (Array.isArray(u.groups)) {
      if (u.groups.length > limits.groups) return `${u.groups.length} groups (at most ${limits.groups})`;
      for (const g of u.groups) {
        const long = tooLong("a group", g);
        if (long) return long;
      }
    }
    const extra = u.extra;
    if (extra !== null && typeof extra === "object" && !Array.isArray(extra)) {
      let keys = 0;
      let values = 0;
      for (const k in extra) {
        if (!Object.hasOwn(extra, k)) continue;
        if (++keys > limits.extraKeys) return `more than ${limits.extraKeys} keys in extra`;
        const long = tooLong("a key of extra", k);
        if (long) return long;
        const vs = (extra as Record<string, unknown>)[k];
        if (!Array.isArray(vs)) continue;
        values += vs.length;
        if (values > limits.extraValues) return `more than ${limits.extraValues} values in extra`;
        for (const v of vs) {
          const long = tooLong(`a value of extra ${JSON.stringify(k.slice(0, 100))}`, v);
          if (long) return long;
        }
      }
    }
    const json = boundedJson(user, limits.total) ?? "";
    if (json.length > limits.total) return `more than ${limits.total / 1024} KiB as JSON`;
    return undefined;
  };
  const found = problem();
  return (
    found && `svc admission: the review's user info is larger than the API server sends (${found}); refused`
  );
}
