/**
 * Peer authorization as plain functions of the peer's verified SPIFFE ID, composed in one place.
 * A denial carries the reason that reaches logs and metrics.
 */
import { RE2JS } from "re2js";
import { SvcError } from "../errors.ts";
import type { SpiffeId } from "./id.ts";

export type Authorization = { allowed: true } | { allowed: false; reason: string };
export type Authorizer = (peer: SpiffeId) => Authorization;

const ALLOW: Authorization = { allowed: true };
const deny = (reason: string): Authorization => ({ allowed: false, reason });

const ANY: Authorizer = () => ALLOW;

/**
 * Compiles SPIFFE ID patterns with Go's RE2 syntax and semantics (re2js, never JS RegExp: the syntax
 * differs and RE2 cannot backtrack on attacker-chosen input). `field` names the configuration path in
 * errors, e.g. `listeners[0].source.spiffe_ids`. All invalid patterns are reported at once.
 */
export function compilePatterns(patterns: readonly string[], field = "spiffe_ids"): RE2JS[] {
  const compiled: RE2JS[] = [];
  const errors: string[] = [];
  patterns.forEach((pattern, i) => {
    try {
      compiled.push(RE2JS.compile(pattern));
    } catch (e) {
      errors.push(
        `${field}[${i}]: invalid pattern ${JSON.stringify(pattern)}: ${(e as Error).message} (Go RE2 syntax)`,
      );
    }
  });
  if (errors.length > 0) throw new SvcError("invalid_pattern", errors.join("\n"));
  return compiled;
}

/**
 * Allows a peer when at least one pattern matches its SPIFFE ID (unanchored, like Go's MatchString;
 * anchor patterns with ^ and $). An empty list allows any authenticated peer (docs/identity.md, "Peer
 * authorization").
 */
export function authorizeMatching(patterns: readonly string[], field?: string): Authorizer {
  if (patterns.length === 0) return ANY;
  const compiled = compilePatterns(patterns, field);
  return (peer) =>
    compiled.some((re) => re.matcher(peer.uri).find())
      ? ALLOW
      : deny(
          `peer ${peer.uri} matches none of ${compiled.length} allowed pattern(s) ${JSON.stringify(patterns)}`,
        );
}

/** Allows exactly the peer `id`: a party named by its SPIFFE ID in the configuration (a witness, a notary). */
export function authorizeExactly(id: string): Authorizer {
  return (peer) => (peer.uri === id ? ALLOW : deny(`peer ${peer.uri} is not ${id}`));
}
