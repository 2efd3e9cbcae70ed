import type { SvidSource } from "../../lib/spiffe/x509-source.ts";
import type { WitnessConfig } from "../config/types.ts";
import type { Logger } from "../log.ts";
import { startPolling } from "./poll.ts";
import { WitnessStore } from "./store.ts";
import { Witness, type WitnessDeps } from "./witness.ts";

/**
 * The witness role (docs/notary.md, "Witnesses"): its database opened at start (a file it cannot open
 * stops the proxy with the reason), the refusals it holds said once, and the polling of the logs that
 * have a URL.
 */
export function startWitness(
  config: WitnessConfig,
  source: SvidSource,
  log: Logger,
  count?: WitnessDeps["count"],
): { witness: Witness; close(): void } {
  const store = WitnessStore.open(config.database);
  const witness = new Witness({
    store,
    source,
    logs: config.logs.map((l) => l.spiffeId),
    log,
    ...(count ? { count } : {}),
  });
  for (const held of store.logs())
    if (held.refused)
      log.error(
        "witness: a log is refused until an operator acts (svc notary witness --resume or --forget)",
        {
          origin: held.origin,
          since: held.refusedAt?.toISOString(),
          reason: held.refused,
        },
      );
  log.info("witness", {
    database: config.database,
    logs: config.logs.map((l) => l.spiffeId),
    polled: config.logs.filter((l) => l.url).length,
  });
  const polling = startPolling(witness, store, config.logs, source, config.pollMs, log);
  return {
    witness,
    close() {
      polling.close();
      store.close();
    },
  };
}
