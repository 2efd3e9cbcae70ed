import { isSvcError, SvcError } from "../../lib/errors.ts";
import type { Pod } from "../../lib/kube/pods.ts";
import { checkpointOrigin, checkpointText, signCheckpoint } from "../../lib/notary-objects/checkpoint.ts";
import { contentId } from "../../lib/notary-objects/ids.ts";
import { signerFor, unverifiedClaims } from "../../lib/notary-objects/jws.ts";
import type { Level } from "../../lib/notary-objects/levels.ts";
import {
  b64u,
  type ConsistencyProof,
  type InclusionProof,
  leafData,
  signTreeHead,
  verifyTreeHead,
} from "../../lib/notary-objects/log.ts";
import {
  consistencyPath,
  equalHashes,
  type Hash,
  inclusionPath,
  leafHash,
  rootAt,
  verifyConsistency,
  verifyInclusion,
} from "../../lib/notary-objects/merkle.ts";
import { type ReceiptExchange, signReceipt } from "../../lib/notary-objects/receipt.ts";
import { type SignedObject, signStatement, type WorkloadFacts } from "../../lib/notary-objects/statement.ts";
import type { BundleSet } from "../../lib/spiffe/bundle.ts";
import { parseCert } from "../../lib/spiffe/cert.ts";
import { podIdentity } from "../../lib/spiffe/id.ts";
import type { SvidSource } from "../../lib/spiffe/x509-source.ts";
import type { X509Svid } from "../../lib/spiffe/x509svid.ts";
import type { Upstream } from "../http/types.ts";
import type { Logger } from "../log.ts";
import type { NotaryStore, TreeHeadRow, Witnessed } from "./store.ts";

export interface NotaryDeps {
  store: NotaryStore;
  source: SvidSource;
  /** A JWT-SVID of this proxy for an audience (the statement's). */
  jwtSvid: (audience: string) => Promise<string>;
  getPod: (namespace: string, name: string) => Promise<Pod | undefined>;
  log: Logger;
  /** How long a statement is used before the pod is looked up again. */
  revalidateMs?: number;
  /** Counts an operation (metrics): result is "ok" or an error code. */
  count?: (operation: "statement" | "log" | "receipt", result: string) => void;
  /** The pushes to the notary's witnesses (witness-push.ts): told when the log grows. */
  witnesses?: { count: number; poke(): void; flush(): Promise<void> };
}

/** How long an inclusion proof asked with `?witnessed=N` waits for a round of pushes to the witnesses. */
const WITNESS_WAIT_MS = 10_000;

interface Cached {
  statement: SignedObject;
  facts: WorkloadFacts;
  checkedAt: number;
  refreshing?: Promise<void>;
}

/**
 * The notary (docs/notary.md): workload statements about authenticated upstreams, cached per upstream
 * certificate and target, revalidated against the cluster API in the background; request logs and signed
 * receipts. Everything it issues is stored and served by notary-query.
 */
export class Notary {
  private readonly statements = new Map<string, Cached>();
  private readonly building = new Map<string, Promise<SignedObject>>();
  private readonly verifiedHeads = new WeakMap<BundleSet, Set<string>>();
  private readonly revalidateMs: number;

  readonly store: NotaryStore;
  /** Why the notary issues nothing: its log failed the start-up consistency check. */
  private refusal?: string;

  constructor(private readonly d: NotaryDeps) {
    this.store = d.store;
    this.revalidateMs = d.revalidateMs ?? 30_000;
  }

  /** Stops issuing and serving: every notarization and query answers 503 with `reason`. */
  refuse(reason: string): void {
    this.refusal = reason;
  }

  /** Serves again after refuse(). */
  resume(): void {
    this.refusal = undefined;
  }

  /** Throws SvcError("notary_unavailable") when the notary refuses. */
  checkServing(): void {
    if (this.refusal) throw new SvcError("notary_unavailable", this.refusal);
  }

  /**
   * A store operation; any failure is the notary being unavailable (the store retries what is
   * transient), so nothing is issued that was not stored.
   */
  private async stored<T>(what: string, op: () => Promise<T>): Promise<T> {
    this.checkServing();
    try {
      return await op();
    } catch (e) {
      if (isSvcError(e, "notary_unavailable")) throw e;
      throw new SvcError(
        "notary_unavailable",
        `the notary database could not ${what}: ${(e as Error).message}`,
      );
    }
  }

  /** The statement about `upstream` as reached at `origin`; throws SvcError("pod_mismatch" | "kube_api"). */
  async statementFor(upstream: Upstream, origin: string): Promise<SignedObject> {
    this.checkServing();
    const leaf = upstream.chain[0];
    if (!leaf) throw new SvcError("notary", "the upstream presented no certificate");
    const key = `${contentId(leaf)} ${origin}`;
    const hit = this.statements.get(key);
    if (hit) {
      if (Date.now() - hit.checkedAt > this.revalidateMs && !hit.refreshing) {
        hit.refreshing = this.build(upstream, origin, key, hit)
          .then(() => undefined)
          .catch((e) => {
            // The pod is gone or changed identity: stop vouching for it.
            this.statements.delete(key);
            this.d.log.warn("notary: workload statement withdrawn", {
              upstream: upstream.id.uri,
              reason: e.message,
            });
          });
      }
      return hit.statement;
    }
    let pending = this.building.get(key);
    if (!pending) {
      pending = this.build(upstream, origin, key)
        .catch((e) => {
          this.d.count?.("statement", (e as { code?: string }).code ?? "error");
          throw e;
        })
        .finally(() => this.building.delete(key));
      this.building.set(key, pending);
    }
    return pending;
  }

  private async build(
    upstream: Upstream,
    origin: string,
    key: string,
    previous?: Cached,
  ): Promise<SignedObject> {
    const facts = await this.facts(upstream);
    if (previous && JSON.stringify(previous.facts) === JSON.stringify(facts)) {
      previous.checkedAt = Date.now();
      previous.refreshing = undefined;
      return previous.statement;
    }
    const svid = this.d.source.getX509Svid();
    const aud = `${origin}/workload-statement`;
    let issuerJwtSvid: string;
    try {
      issuerJwtSvid = await this.d.jwtSvid(aud);
    } catch (e) {
      throw new SvcError("notary", `no JWT-SVID from the Workload API for ${aud}: ${(e as Error).message}`);
    }
    const statement = await signStatement(svid.id.uri, origin, { ...facts, issuerJwtSvid }, signerFor(svid));
    const leaf = parseCert(upstream.chain[0] as Uint8Array);
    await this.stored("store the statement", async () => {
      await this.d.store.putCertificate(facts.certificateID, leaf.der, upstream.id.uri, leaf.notAfter);
      await this.d.store.putStatement(statement.id, statement.jws, upstream.id.uri, facts.certificateID);
    });
    this.d.witnesses?.poke();
    this.statements.set(key, { statement, facts, checkedAt: Date.now() });
    this.d.count?.("statement", "ok");
    this.d.log.info("notary: workload statement issued", { id: statement.id, upstream: upstream.id.uri });
    return statement;
  }

  /**
   * Checks the upstream against its pod (docs/notary.md, "What the notary needs") and collects what the
   * statement says.
   */
  private async facts(upstream: Upstream): Promise<WorkloadFacts> {
    const id = upstream.id;
    const p = podIdentity(id);
    if (!p)
      throw new SvcError(
        "pod_mismatch",
        `upstream ${id.uri} is not a pod identity (spiffe://<trust_domain>/ns/<namespace>/sa/<service_account>/pod/<pod_name>/<pod_uid>); the notary states only pod workloads`,
      );
    const pod = await this.d.getPod(p.namespace, p.podName);
    if (!pod)
      throw new SvcError(
        "pod_mismatch",
        `pod ${p.namespace}/${p.podName} of upstream ${id.uri} does not exist`,
      );
    if (pod.metadata.uid !== p.podUid)
      throw new SvcError(
        "pod_mismatch",
        `pod ${p.namespace}/${p.podName} has UID ${pod.metadata.uid}, but upstream ${id.uri} names UID ${p.podUid}`,
      );
    const sa = pod.spec.serviceAccountName ?? "default";
    if (sa !== p.serviceAccount)
      throw new SvcError(
        "pod_mismatch",
        `pod ${p.namespace}/${p.podName} runs as service account ${sa}, but upstream ${id.uri} names ${p.serviceAccount}`,
      );
    return {
      trustDomain: id.trustDomain,
      spiffeId: id.uri,
      namespace: p.namespace,
      serviceAccount: sa,
      podName: p.podName,
      podUid: p.podUid,
      images: [...(pod.spec.initContainers ?? []), ...pod.spec.containers].map((c) => c.image),
      labels: pod.metadata.labels ?? {},
      annotations: pod.metadata.annotations ?? {},
      certificateID: contentId(upstream.chain[0] as Uint8Array),
    };
  }

  /**
   * Records an exchange at `level`: logRequest stores it, signRequest also signs a receipt and returns it.
   */
  async record(
    level: Level,
    statementId: string,
    origin: string,
    requestId: string,
    exchange: ReceiptExchange,
    bodies: { request: Uint8Array; response: Uint8Array },
  ): Promise<SignedObject | undefined> {
    if (level === "workload") return undefined;
    this.checkServing();
    const entry = {
      requestId,
      statementId,
      level,
      method: exchange.request.method,
      path: exchange.request.path,
      requestHeaders: exchange.request.headers,
      requestBody: bodies.request,
      status: exchange.response.status,
      responseHeaders: exchange.response.headers,
      responseBody: bodies.response,
    };
    if (level === "logRequest") {
      await this.stored("log the request", () => this.d.store.logExchange(entry));
      this.d.witnesses?.poke();
      this.d.count?.("log", "ok");
      return undefined;
    }
    const svid = this.d.source.getX509Svid();
    const receipt = await signReceipt(svid.id.uri, origin, statementId, requestId, exchange, signerFor(svid));
    const stream = exchange.response.stream;
    await this.stored("store the receipt", () =>
      this.d.store.logExchange(entry, {
        id: receipt.id,
        jws: receipt.jws,
        ...(stream ? { streamId: stream.id } : {}),
      }),
    );
    this.d.witnesses?.poke();
    this.d.count?.("receipt", "ok");
    return receipt;
  }

  /**
   * The inclusion proof of a receipt against a signed tree head that covers it: the newest kept, or a new
   * one of the log as it is now, signed and kept. With `witnessed` > 0, against the newest kept one that
   * at least that many witnesses cosigned, with their cosignatures (after a round of pushes, when none
   * is yet). The proof is checked before it is served; undefined when there is no such receipt.
   */
  async proof(
    receiptId: string,
    origin: string,
    witnessed: Witnessed = { count: 0 },
  ): Promise<InclusionProof | undefined> {
    const store = this.d.store;
    const found = await this.stored("make an inclusion proof", async () => {
      const [index, receipt] = await Promise.all([
        store.leafIndex("receipt", receiptId),
        store.receipt(receiptId),
      ]);
      return index === undefined || !receipt ? undefined : { index, receipt };
    });
    if (!found) return undefined;
    const { index, receipt } = found;
    const pushedTo = this.d.witnesses?.count ?? 0;
    if (witnessed.count > pushedTo)
      throw new SvcError(
        "usage",
        `no tree head can be cosigned by ${witnessed.count} witnesses: this notary pushes to ${pushedTo} (notary.witnesses)`,
      );
    let cosignatures: string[] | undefined;
    let head: TreeHeadRow | undefined;
    if (witnessed.count > 0) {
      const cosigned =
        (await this.cosignedHead(index, witnessed)) ?? (await this.afterPush(index, witnessed));
      if (!cosigned)
        throw new SvcError(
          "usage",
          `no tree head that covers receipt ${receiptId} is cosigned by ${witnessed.count} witness${witnessed.count > 1 ? "es" : ""}${witnessed.by ? ` of ${witnessed.by.join(", ")}` : ""} yet (they did not cosign within the wait; the notary's log says why)`,
        );
      ({ head, cosignatures } = cosigned);
    }
    return this.stored("make an inclusion proof", async () => {
      const latest = head ? undefined : await store.latestTreeHead();
      // One that does not verify now (forged in the database, or signed under an authority since
      // rotated out of the bundle) is replaced by a new one rather than served.
      if (!head && latest && latest.size > index && (await this.verifies(latest.jws))) head = latest;
      if (!head) {
        const now = await store.head();
        const kept = latest?.size === now.size ? latest : await store.treeHead(now.size);
        head = { ...now, jws: await this.signedHead(kept, now.size, now.root, origin) };
      }
      const path = await inclusionPath((l, i) => store.node(l, i), index, head.size);
      if (!verifyInclusion(leafHash(leafData("receipt", receipt.jws)), index, head.size, path, head.root))
        throw new SvcError(
          "notary_unavailable",
          `the notary log does not prove receipt ${receiptId} against its tree head of size ${head.size}: the log was changed`,
        );
      return {
        receiptId,
        leafIndex: index,
        treeSize: head.size,
        path: path.map(b64u),
        treeHead: head.jws,
        ...(cosignatures ? { cosignatures } : {}),
      };
    });
  }

  /** The newest kept tree head over leaf `index` with `witnessed` cosignatures, if it verifies now. */
  private async cosignedHead(index: number, witnessed: Witnessed) {
    const found = await this.stored("find a cosigned tree head", () =>
      this.d.store.cosignedHead(index, witnessed),
    );
    return found && (await this.verifies(found.head.jws)) ? found : undefined;
  }

  /** cosignedHead after a round of pushes to the witnesses (at most WITNESS_WAIT_MS). */
  private async afterPush(index: number, witnessed: Witnessed) {
    const pushes = this.d.witnesses;
    if (!pushes) return undefined;
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      pushes.flush(),
      new Promise((resolve) => {
        timer = setTimeout(resolve, WITNESS_WAIT_MS);
      }),
    ]);
    clearTimeout(timer);
    return this.cosignedHead(index, witnessed);
  }

  /**
   * The consistency proof between the log's first `from` leaves and its first `to` (its size now when
   * undefined), with a signed tree head of each (none for 0 leaves), checked before it is returned.
   * `from` must be the size of a tree head the notary gave out (one is kept for each): only those are
   * held by anyone, and signing one per size asked for would let any caller grow the database. Throws
   * SvcError("usage") for sizes the log does not have, or a `from` no tree head was given out for.
   */
  async consistency(from: number, to: number | undefined, origin: string): Promise<ConsistencyProof> {
    const store = this.d.store;
    const { now, fromKept } = await this.stored("read the log's head", async () => ({
      now: await store.head(),
      fromKept: from > 0 ? await store.treeHead(from) : undefined,
    }));
    const size = to ?? now.size;
    if (size > now.size) throw new SvcError("usage", `the log has ${now.size} leaves, not ${size}`);
    if (from > size) throw new SvcError("usage", `from (${from}) is larger than to (${size})`);
    if (size === 0) throw new SvcError("usage", "the log is empty: there is no tree head to prove against");
    if (from > 0 && !fromKept)
      throw new SvcError(
        "usage",
        `no tree head of ${from} leaves was given out: ask from the size of a tree head you hold`,
      );
    return this.stored("make a consistency proof", async () => {
      const read = (level: number, index: number) => store.node(level, index);
      const [fromRoot, toRoot, path] = await Promise.all([
        rootAt(read, from),
        rootAt(read, size),
        consistencyPath(read, from, size),
      ]);
      if (!verifyConsistency(from, size, path, fromRoot, toRoot))
        throw new SvcError(
          "notary_unavailable",
          `the notary log does not prove its first ${from} leaves consistent with its first ${size}: the log was changed`,
        );
      return {
        fromSize: from,
        toSize: size,
        path: path.map(b64u),
        ...(from > 0 ? { from: await this.signedHead(fromKept, from, fromRoot, origin) } : {}),
        // A head of the log as it is now is kept, as for inclusion proofs; an earlier size is not.
        to: await this.signedHead(
          size === from ? fromKept : await store.treeHead(size),
          size,
          toRoot,
          origin,
          size === now.size,
        ),
      };
    });
  }

  /**
   * The log now as a C2SP checkpoint (docs/notary.md, "Checkpoints"), signed with the current SVID key,
   * and a JWS tree head of the same size and root signed with the same key (its chain says whose key it
   * is). A tree head of this size is kept, so that a consistency proof can start from it later. Throws
   * SvcError("usage") when the log is empty.
   */
  async checkpoint(
    origin: string,
  ): Promise<{ note: string; treeHead: string; size: number; root: Hash; signedAt: number }> {
    const store = this.d.store;
    const now = await this.stored("read the log's head", () => store.head());
    if (now.size === 0) throw new SvcError("usage", "the log is empty: there is no checkpoint to sign");
    return this.stored("sign a checkpoint", async () => {
      // Kept unless one of this size is (the first kept wins): a consistency proof can start there.
      const svid = this.d.source.getX509Svid();
      const name = checkpointOrigin(svid.id.uri);
      const treeHead = await this.signHead(svid, now.size, now.root, origin, true);
      return {
        note: signCheckpoint(checkpointText(name, now.size, now.root), name, signerFor(svid).key),
        treeHead,
        ...now,
        signedAt: unverifiedClaims<{ iat: number }>(treeHead).iat,
      };
    });
  }

  /**
   * The tree head of the log's first `size` leaves, whose root is `root`: `kept` (the one kept for that
   * size, as the caller read it), if it verifies against the bundle, or a new one, signed (and kept when
   * `keep`). A kept one with another root means the log was changed.
   */
  private async signedHead(
    kept: TreeHeadRow | undefined,
    size: number,
    root: Hash,
    origin: string,
    keep = true,
  ): Promise<string> {
    if (kept && !equalHashes(kept.root, root))
      throw new SvcError(
        "notary_unavailable",
        `the notary log's tree head of size ${size} has another root than its leaves: the log was changed`,
      );
    if (kept && (await this.verifies(kept.jws))) return kept.jws;
    return this.signHead(this.d.source.getX509Svid(), size, root, origin, keep);
  }

  /** A new tree head signed with `svid`, kept when `keep`, and logged (docs/notary.md: shipped logs hold them). */
  private async signHead(
    svid: X509Svid,
    size: number,
    root: Hash,
    origin: string,
    keep: boolean,
  ): Promise<string> {
    const jws = await signTreeHead(svid.id.uri, origin, size, root, signerFor(svid));
    if (keep) await this.d.store.putTreeHead({ size, root, jws });
    this.d.log.info("notary: tree head signed", { size, root: b64u(root) });
    return jws;
  }

  /**
   * Whether a kept tree head verifies against the bundle now. The answer is remembered per bundle (a new
   * one comes with each Workload API update): every proof served checks one or two kept heads, and a
   * check costs about as much as the rest of the proof.
   */
  private async verifies(jws: string): Promise<boolean> {
    const bundles = this.d.source.bundles();
    let known = this.verifiedHeads.get(bundles);
    if (known?.has(jws)) return true;
    try {
      await verifyTreeHead(jws, bundles);
    } catch {
      return false;
    }
    if (!known || known.size >= VERIFIED_HEADS) {
      known = new Set();
      this.verifiedHeads.set(bundles, known);
    }
    known.add(jws);
    return true;
  }
}

/** Kept tree heads remembered as verified, per bundle, at most this many (then the set starts over). */
const VERIFIED_HEADS = 1024;
