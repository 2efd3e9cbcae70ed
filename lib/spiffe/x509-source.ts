import { SvcError } from "../errors.ts";
import { resolveEndpoint } from "./address.ts";
import { X509Bundle as Bundle, BundleSet, type BundleSource, type X509Bundle } from "./bundle.ts";
import { parseSpiffeId } from "./id.ts";
import { WorkloadApiClient } from "./workload-client.ts";
import type { X509SvidResponse } from "./workload-messages.ts";
import { parseX509Svid, type X509Svid } from "./x509svid.ts";

/** What the TLS layer needs from an identity source; X509Source implements it, tests may too. */
export interface SvidSource extends BundleSource {
  getX509Svid(): X509Svid;
  bundles(): BundleSet;
  /** Called after every accepted update; returns an unsubscribe function. */
  onUpdate(listener: () => void): () => void;
}

export interface X509Context {
  readonly svids: readonly X509Svid[];
  readonly bundles: BundleSet;
}

/**
 * Turns one X509SVIDResponse into an X509Context, or throws when the message breaks a rule (missing
 * mandatory field, unparsable SVID): the Workload API spec says to discard such a message.
 */
function toX509Context(res: X509SvidResponse): X509Context {
  if (res.svids.length === 0)
    throw new SvcError("workload_api", "the Workload API sent an update with no X.509-SVID");
  const svids = res.svids.map((m, i) => {
    if (!m.spiffeId || m.x509Svid.length === 0 || m.x509SvidKey.length === 0 || m.bundle.length === 0) {
      throw new SvcError(
        "workload_api",
        `X.509-SVID ${i} in the Workload API update lacks a mandatory field`,
      );
    }
    const svid = parseX509Svid(m.x509Svid, m.x509SvidKey, m.hint);
    if (svid.id.uri !== parseSpiffeId(m.spiffeId).uri) {
      throw new SvcError("workload_api", `X.509-SVID ${i} is for ${svid.id.uri} but labelled ${m.spiffeId}`);
    }
    return svid;
  });
  const own = svids[0] as X509Svid;
  const bundles: X509Bundle[] = [Bundle.fromDer(own.id.trustDomain, res.svids[0]?.bundle as Uint8Array)];
  for (const [td, der] of res.federatedBundles) {
    const bundle = Bundle.fromDer(td, der);
    if (bundle.trustDomain !== own.id.trustDomain) bundles.push(bundle);
  }
  return { svids, bundles: new BundleSet(bundles) };
}

export interface X509SourceOptions {
  /** Workload API address; SPIFFE_ENDPOINT_SOCKET when absent. */
  address?: string;
  /** How long open() waits for the first SVID before failing. */
  timeoutMs?: number;
  /** Picks the default SVID; the first one (the spec's default identity) otherwise. */
  pick?: (svids: readonly X509Svid[]) => X509Svid | undefined;
  onError?: (e: SvcError) => void;
}

/**
 * The process's X.509 identity: the current SVID and bundles from the Workload API stream, replaced
 * atomically on every valid update. When the agent goes away it reconnects with backoff and keeps
 * serving the last good SVID until that SVID expires.
 */
export class X509Source implements SvidSource {
  private context: X509Context | undefined;
  private lastError: SvcError | undefined;
  private readonly listeners = new Set<() => void>();
  /** The Workload API connection, for the process's other calls (JWT-SVIDs); closed by close(). */
  readonly client: WorkloadApiClient;
  private watch: { cancel(): void } | undefined;

  private constructor(
    target: string,
    private readonly options: X509SourceOptions,
  ) {
    this.client = new WorkloadApiClient(target);
  }

  static open(options: X509SourceOptions = {}): Promise<X509Source> {
    const source = new X509Source(resolveEndpoint(options.address), options);
    return source.start(options.timeoutMs ?? 30_000);
  }

  private start(timeoutMs: number): Promise<X509Source> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.close();
        const why = this.lastError ? `: ${this.lastError.message}` : "";
        reject(
          new SvcError(
            "workload_api",
            `no X.509-SVID from the Workload API at ${this.client.target} within ${timeoutMs} ms${why}`,
          ),
        );
      }, timeoutMs);
      const first = this.onUpdate(() => {
        clearTimeout(timer);
        first();
        resolve(this);
      });
      this.watch = this.client.watchX509Context({
        onMessage: (res) => this.update(res),
        onError: (e, willRetry) => {
          this.lastError = e;
          this.options.onError?.(e);
          if (!willRetry && !this.context) {
            clearTimeout(timer);
            this.close();
            reject(e);
          }
        },
      });
    });
  }

  private update(res: X509SvidResponse): void {
    let next: X509Context;
    try {
      next = toX509Context(res);
    } catch (e) {
      this.lastError = e instanceof SvcError ? e : new SvcError("workload_api", String(e));
      this.options.onError?.(this.lastError);
      return;
    }
    this.context = next;
    for (const l of this.listeners) l();
  }

  getX509Svid(): X509Svid {
    const ctx = this.current();
    const svid = (this.options.pick ?? ((s) => s[0]))(ctx.svids);
    if (!svid) throw new SvcError("workload_api", "no X.509-SVID matches the configured picker");
    if (svid.notAfter.getTime() <= Date.now()) {
      const why = this.lastError ? ` (last Workload API error: ${this.lastError.message})` : "";
      throw new SvcError(
        "workload_api",
        `the X.509-SVID of ${svid.id.uri} expired at ${svid.notAfter.toISOString()}${why}`,
      );
    }
    return svid;
  }

  getX509Bundle(trustDomain: string): X509Bundle | undefined {
    return this.context?.bundles.getX509Bundle(trustDomain);
  }

  bundles(): BundleSet {
    return this.current().bundles;
  }

  svids(): readonly X509Svid[] {
    return this.current().svids;
  }

  private current(): X509Context {
    if (!this.context) throw new SvcError("workload_api", "the X509 source has no SVID yet or is closed");
    return this.context;
  }

  onUpdate(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  close(): void {
    this.watch?.cancel();
    this.client.close();
    this.context = undefined;
    this.listeners.clear();
  }
}
