import { isSvcError, SvcError } from "../../lib/errors.ts";
import type { Pod } from "../../lib/kube/pods.ts";
import { JwtSvidSource } from "../../lib/spiffe/jwt-source.ts";
import type { X509Source } from "../../lib/spiffe/x509-source.ts";
import type { NotaryDatabase, WitnessPeer } from "../config/types.ts";
import type { Logger } from "../log.ts";
import { checkLog } from "./log-check.ts";
import { Notary, type NotaryDeps } from "./notary.ts";
import { openStore } from "./open-store.ts";
import { type PusherDeps, WitnessPusher } from "./witness-push.ts";

/**
 * Opens what the notary needs, failing at start with a clear message rather than on the first request:
 * the database, cluster API credentials, and a JWT-SVID from the Workload API (docs/notary.md, "What the
 * notary needs"). Then checks the notary log; a log that fails the check leaves the notary refusing (503)
 * with the reason, while the listeners serve everything that needs no notary.
 */
export async function startNotary(
  database: NotaryDatabase,
  source: X509Source,
  log: Logger,
  count?: NotaryDeps["count"],
  pushes?: { witnesses: WitnessPeer[]; pushIntervalMs: number },
  countPush?: PusherDeps["count"],
): Promise<{ notary: Notary; close(): Promise<void> }> {
  // client-node is loaded only by proxies that run a notary or an admission webhook.
  const { openKubeClient } = await import("../../lib/kube/client.ts");
  const kube = openKubeClient();
  // JWT-SVIDs over the X509Source's own Workload API connection.
  const jwt = new JwtSvidSource(source.client, source.getX509Svid().id.uri);
  try {
    await jwt.fetch("svc-proxy-notary");
  } catch (e) {
    throw new SvcError(
      "notary",
      `notary: the Workload API issues no JWT-SVID to this proxy (the notary signs its statements with one): ${(e as Error).message}`,
    );
  }
  const store = await openStore(database);
  log.info("notary", { database: store.location, cluster: kube.server, credentials: kube.from });
  let pusher: WitnessPusher | undefined;
  const notary = new Notary({
    store,
    source,
    jwtSvid: (aud) => jwt.fetch(aud),
    getPod: async (namespace, name) => {
      try {
        return (await kube.core.readNamespacedPod({ namespace, name })) as Pod;
      } catch (e) {
        // client-node's ApiException carries the HTTP status as a number; our own errors carry a string
        // code, and the runtime's abort and timeout errors small numbers of their own.
        const code = (e as { code?: unknown }).code;
        if (code === 404) return undefined;
        if (typeof code === "number" && code >= 400 && code < 600)
          throw new SvcError(
            "kube_api",
            `cluster API refused to get pod ${namespace}/${name}: ${code} (${kube.from}; "get" on pods is needed)`,
          );
        if (isSvcError(e)) throw e;
        // A deadline that passed, or an answer client-node cannot read: the caller gets a 502 saying so.
        throw new SvcError(
          "kube_api",
          `cluster API ${kube.server} gave no answer about pod ${namespace}/${name} (${kube.from}): ${(e as Error).message}`,
        );
      }
    },
    log,
    ...(count ? { count } : {}),
    ...(pushes?.witnesses.length
      ? {
          witnesses: {
            count: pushes.witnesses.length,
            poke: () => pusher?.poke(),
            flush: async () => pusher?.flush(),
          },
        }
      : {}),
  });
  if (pushes?.witnesses.length) {
    pusher = new WitnessPusher({
      notary,
      witnesses: pushes.witnesses,
      source,
      log,
      intervalMs: pushes.pushIntervalMs,
      ...(countPush ? { count: countPush } : {}),
    });
    log.info("notary: checkpoints pushed to witnesses", {
      witnesses: pushes.witnesses.map((w) => w.spiffeId),
    });
  }
  const checkThenServe = async () => {
    const check = await checkLog(store, undefined);
    if (check.problems.length > 0) {
      log.error("notary: the log failed its consistency check; the notary refuses until it is repaired", {
        problems: check.problems,
        size: check.size,
      });
      notary.refuse(
        `the notary log failed its consistency check at start-up (${check.problems[0]}${check.problems.length > 1 ? `, and ${check.problems.length - 1} more` : ""}); see the proxy's log`,
      );
    } else {
      notary.resume();
      log.info("notary: log checked", { size: check.size, tree_heads: check.treeHeads });
      // The witnesses see the log as it is at start: a cut made while the notary was down shows now.
      pusher?.poke(0);
    }
  };
  const unreachable = store.unavailable();
  if (unreachable === undefined) await checkThenServe();
  else {
    // The listeners start; the notary answers 503 until its database is reachable and its log checked.
    log.error("notary: the database is unreachable; notarization answers 503 until it is", {
      database: store.location,
      reason: unreachable,
    });
    notary.refuse(`the notary's database ${store.location} is unreachable (${unreachable}); still trying`);
    store.connected.then(
      () => {
        log.info("notary: the database is reachable", { database: store.location });
        return checkThenServe();
      },
      (e: Error) => {
        log.error("notary: the database refused; the notary refuses until the proxy restarts", {
          reason: e.message,
        });
        notary.refuse(e.message);
      },
    );
  }
  return {
    notary,
    close: async () => {
      pusher?.close();
      await store.close();
    },
  };
}
