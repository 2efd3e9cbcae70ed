/**
 * The rules of the witness settings (docs/notary.md, "Witnesses"): the witnesses a notary pushes to
 * (notary.witnesses) and the witness role (witness): SPIFFE IDs that parse, https:// URLs (SPIFFE mTLS),
 * no one listed twice, a database file whose directory exists.
 */
import { MAX_COSIGNATURES } from "../../lib/notary-objects/cosignature.ts";
import { parseSpiffeId } from "../../lib/spiffe/id.ts";
import { writableParent } from "./files.ts";
import { durationMs } from "./rules.ts";
import type { ConfigInput } from "./schema.ts";
import type { Problem, WitnessConfig, WitnessPeer } from "./types.ts";

/** One SPIFFE ID and URL checked; undefined when either is wrong (reported). */
function peer(
  at: string,
  p: { spiffe_id: string; url: string },
  seen: Set<string>,
  problem: Problem,
): { spiffeId: string; url: URL | undefined } | undefined {
  let spiffeId: string | undefined;
  try {
    spiffeId = parseSpiffeId(p.spiffe_id).uri;
    if (seen.has(spiffeId)) problem(`${at}.spiffe_id`, `${spiffeId} is listed twice`);
    seen.add(spiffeId);
  } catch (e) {
    problem(`${at}.spiffe_id`, (e as Error).message);
  }
  let url: URL | undefined;
  if (p.url) {
    try {
      url = new URL(p.url);
    } catch {
      url = undefined;
    }
    if (!url || url.protocol !== "https:" || !url.hostname) {
      problem(
        `${at}.url`,
        `${JSON.stringify(p.url)} is not an https:// URL (witnesses and notaries are reached over SPIFFE mTLS)`,
      );
      return undefined;
    }
  }
  return spiffeId ? { spiffeId, url } : undefined;
}

export function notaryWitnesses(
  n: NonNullable<ConfigInput["notary"]>,
  problem: Problem,
): { witnesses: WitnessPeer[]; pushIntervalMs: number } {
  const seen = new Set<string>();
  const witnesses = n.witnesses.flatMap((w, i) => {
    const p = peer(`notary.witnesses[${i}]`, w, seen, problem);
    return p?.url ? [{ spiffeId: p.spiffeId, url: p.url }] : [];
  });
  if (n.witnesses.length > 0 && !n.enable) problem("notary.witnesses", "needs notary.enable: true");
  if (n.witnesses.length > MAX_COSIGNATURES)
    problem(
      "notary.witnesses",
      `${n.witnesses.length} witnesses: at most ${MAX_COSIGNATURES} (a verifier reads no more cosignatures with one tree head)`,
    );
  return { witnesses, pushIntervalMs: durationMs(n.push_interval, "10s", "notary.push_interval", problem) };
}

export function witnessConfig(w: NonNullable<ConfigInput["witness"]>, problem: Problem): WitnessConfig {
  writableParent("witness.database", w.database, problem);
  if (w.logs.length === 0)
    problem("witness.logs", "list at least one log (the SPIFFE ID of a notary to witness)");
  const seen = new Set<string>();
  const logs = w.logs.flatMap((l, i) => {
    const p = peer(`witness.logs[${i}]`, l, seen, problem);
    return p ? [p] : [];
  });
  return {
    database: w.database,
    logs,
    pollMs: durationMs(w.poll_interval, "30s", "witness.poll_interval", problem),
  };
}
