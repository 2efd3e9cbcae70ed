/**
 * The compartment marks of every object of one core kind (pods, secrets, configmaps, serviceaccounts,
 * persistentvolumeclaims, services), kept current by a list and a watch (as a client-go metadata informer does), so
 * that an admission review never waits on the API server. Only metadata is asked for (PartialObjectMetadata):
 * a Secret's data never reaches the webhook. Only the UID and the marks are kept (a few dozen bytes an
 * object). The watch resumes from the last resource version it saw (bookmarks keep that fresh); when the
 * server says the version is too old (410 Gone), or the list or watch fails, the cache lists again after a
 * backoff, keeping its entries meanwhile: an object it has not seen yet is looked up directly by the caller.
 */
import type { KubeClient } from "./client.ts";
import { type Marks, marksOfMeta } from "./mls.ts";

export interface MarksEntry extends Marks {
  uid: string;
}

export interface ObjectMeta {
  name?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/** The kinds whose marks are cached, by resource, with their Kind (all in the core group). */
export const CACHED_KINDS = {
  pods: "Pod",
  secrets: "Secret",
  configmaps: "ConfigMap",
  serviceaccounts: "ServiceAccount",
  persistentvolumeclaims: "PersistentVolumeClaim",
  services: "Service",
} as const;
export type CachedKind = keyof typeof CACHED_KINDS;

export interface MarksCacheEvents {
  synced(kind: CachedKind, objects: number, ms: number): void;
  error(kind: CachedKind, message: string, retryMs: number): void;
}

const PAGE = 500;
// Short watches: a connection that died silently is noticed within SILENCE_MS, not minutes later.
const WATCH_SECONDS = 60;
const SILENCE_MS = (WATCH_SECONDS + 30) * 1000;
const EXPIRED_AT_ONCE_MS = 10_000;
const BACKOFF_MS = [500, 1_000, 2_000, 5_000, 10_000, 30_000];
const METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

export const entryOf = (meta: ObjectMeta | undefined): MarksEntry => ({
  uid: meta?.uid ?? "",
  ...marksOfMeta(meta),
});

/** One object's metadata read directly (for a cache miss); null when there is no such object. */
export async function readMeta(
  client: KubeClient,
  kind: CachedKind,
  namespace: string,
  name: string,
  signal?: AbortSignal,
): Promise<ObjectMeta | null> {
  const res = await client.fetch(
    `/api/v1/namespaces/${encodeURIComponent(namespace)}/${kind}/${encodeURIComponent(name)}`,
    { headers: { accept: METADATA }, ...(signal ? { signal } : {}) },
  );
  if (res.status === 404) return null;
  if (!res.ok)
    throw new Error(`read ${kind} ${namespace}/${name}: ${res.status} ${(await res.text()).slice(0, 200)}`);
  return ((await res.json()) as { metadata?: ObjectMeta }).metadata ?? {};
}

export class MarksCache {
  private objects = new Map<string, MarksEntry>();
  private resourceVersion = "";
  private synced = false;
  /** When the API server last confirmed the cache (a list, a watch event, a watch's normal end). */
  private heard = 0;
  private failures = 0;
  private readonly stopped = new AbortController();
  private readyWaiters: (() => void)[] = [];

  constructor(
    private readonly client: KubeClient,
    readonly kind: CachedKind,
    private readonly events: MarksCacheEvents,
  ) {}

  start(): void {
    void this.loop();
  }

  stop(): void {
    this.stopped.abort();
  }

  get ready(): boolean {
    return this.synced;
  }

  /** Resolves once the first list is in. */
  whenReady(): Promise<void> {
    return this.synced ? Promise.resolve() : new Promise((resolve) => this.readyWaiters.push(resolve));
  }

  /**
   * The object's entry; undefined when the cache has not heard from the API server for SILENCE_MS (its
   * list or watch failing), so that the caller reads the object itself rather than trust an old entry.
   */
  get(namespace: string, name: string): MarksEntry | undefined {
    if (Date.now() - this.heard > SILENCE_MS) return undefined;
    return this.objects.get(`${namespace}/${name}`);
  }

  private async loop(): Promise<void> {
    let mustList = true;
    while (!this.stopped.signal.aborted) {
      try {
        const listed = mustList;
        if (listed) await this.list();
        const watching = Date.now();
        mustList = await this.watch();
        if (!mustList) this.heard = Date.now();
        // A resource version that expires at once after a list is a failure, with a backoff, not a loop;
        // one that expires when a resumed watch starts is routine.
        if (mustList && listed && Date.now() - watching < EXPIRED_AT_ONCE_MS)
          throw new Error(`watch ${this.kind}: resource version expired (410 Gone) right after a list`);
        this.failures = 0;
      } catch (e) {
        if (this.stopped.signal.aborted) return;
        const retryMs = BACKOFF_MS[Math.min(this.failures, BACKOFF_MS.length - 1)] as number;
        this.failures++;
        this.events.error(this.kind, (e as Error).message, retryMs);
        mustList = true;
        await new Promise<void>((resolve) => {
          const wake = () => {
            clearTimeout(t);
            resolve();
          };
          const t = setTimeout(() => {
            this.stopped.signal.removeEventListener("abort", wake);
            resolve();
          }, retryMs);
          this.stopped.signal.addEventListener("abort", wake, { once: true });
        });
      }
    }
  }

  private async list(): Promise<void> {
    const started = performance.now();
    const next = new Map<string, MarksEntry>();
    let token: string | undefined;
    do {
      const query = new URLSearchParams({ limit: String(PAGE), ...(token ? { continue: token } : {}) });
      const res = await this.client.fetch(`/api/v1/${this.kind}?${query}`, {
        headers: { accept: METADATA_LIST },
        signal: AbortSignal.any([this.stopped.signal, AbortSignal.timeout(30_000)]),
      });
      if (!res.ok) throw new Error(`list ${this.kind}: ${res.status} ${(await res.text()).slice(0, 200)}`);
      const page = (await res.json()) as {
        items?: { metadata?: ObjectMeta }[];
        metadata?: { continue?: string; resourceVersion?: string };
      };
      for (const o of page.items ?? [])
        next.set(`${o.metadata?.namespace}/${o.metadata?.name}`, entryOf(o.metadata));
      token = page.metadata?.continue || undefined;
      this.resourceVersion = page.metadata?.resourceVersion ?? "";
    } while (token);
    this.objects = next;
    this.heard = Date.now();
    this.events.synced(this.kind, next.size, Math.round(performance.now() - started));
    if (!this.synced) {
      this.synced = true;
      for (const resolve of this.readyWaiters.splice(0)) resolve();
    }
  }

  /** One watch request, until the server ends it. Returns true when the cache must list again. */
  private async watch(): Promise<boolean> {
    const query = new URLSearchParams({
      watch: "true",
      allowWatchBookmarks: "true",
      resourceVersion: this.resourceVersion,
      timeoutSeconds: String(WATCH_SECONDS),
    });
    // The server ends the watch after WATCH_SECONDS; silence well beyond that means a dead connection.
    const silence = new AbortController();
    const stop = () => silence.abort(this.stopped.signal.reason);
    this.stopped.signal.addEventListener("abort", stop);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const quiet = () => {
      clearTimeout(timer);
      timer = setTimeout(
        () => silence.abort(new Error(`watch ${this.kind}: no data for ${SILENCE_MS / 1000}s`)),
        SILENCE_MS,
      );
    };
    try {
      quiet();
      const res = await this.client.fetch(`/api/v1/${this.kind}?${query}`, {
        signal: silence.signal,
        headers: { accept: METADATA },
      });
      if (res.status === 410) return true;
      if (!res.ok) throw new Error(`watch ${this.kind}: ${res.status} ${(await res.text()).slice(0, 200)}`);
      if (!res.body) throw new Error(`watch ${this.kind}: the response has no body`);
      return await this.read(res.body, quiet);
    } catch (e) {
      throw silence.signal.aborted && !this.stopped.signal.aborted ? silence.signal.reason : e;
    } finally {
      clearTimeout(timer);
      this.stopped.signal.removeEventListener("abort", stop);
      silence.abort(new Error("watch ended")); // closes a response left unread (after a 410 event)
    }
  }

  /** Applies the events of one watch response; true when the cache must list again. */
  private async read(body: ReadableStream<Uint8Array>, onData: () => void): Promise<boolean> {
    const decoder = new TextDecoder();
    let buffered = "";
    for await (const chunk of body) {
      onData();
      buffered += decoder.decode(chunk, { stream: true });
      let nl = buffered.indexOf("\n");
      while (nl >= 0) {
        const line = buffered.slice(0, nl).trim();
        buffered = buffered.slice(nl + 1);
        nl = buffered.indexOf("\n");
        if (line && this.apply(JSON.parse(line) as WatchEvent)) return true;
      }
    }
    return false;
  }

  /** Applies one event; true when the watch must end and the cache list again. */
  private apply(event: WatchEvent): boolean {
    const meta = event.object?.metadata;
    if (event.type === "ERROR") {
      const status = event.object as { code?: number; message?: string };
      if (status.code === 410) return true;
      throw new Error(`watch ${this.kind}: ${status.message ?? "error event"}`);
    }
    if (meta?.resourceVersion) this.resourceVersion = meta.resourceVersion;
    this.heard = Date.now();
    if (event.type === "BOOKMARK" || !meta) return false;
    const key = `${meta.namespace}/${meta.name}`;
    if (event.type === "DELETED") this.objects.delete(key);
    else this.objects.set(key, entryOf(meta));
    return false;
  }
}

interface WatchEvent {
  type: "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK" | "ERROR";
  object?: { metadata?: ObjectMeta };
}
