import type { V1Pod } from "@kubernetes/client-node";
import type { KubeClient } from "./client.ts";
import { COMPARTMENT_ANNOTATION, COMPARTMENT_LABEL, LEVEL_ANNOTATION } from "./inject.ts";

/**
 * Every pod's compartment marks, kept current by a list and a watch (as a client-go informer does), so
 * that an admission review never waits on the API server. Only the UID and the marks are kept (a few
 * dozen bytes a pod). The watch resumes from the last resource version it saw (bookmarks keep that
 * fresh); when the server says the version is too old (410 Gone), or the list or watch fails, the cache
 * lists again after a backoff, keeping its entries meanwhile: a pod it has not seen yet is looked up
 * directly by the caller.
 */
export interface PodEntry extends PodMarks {
  uid: string;
}

/** A pod's compartment marks (2.2): its label and the two annotations, each undefined when absent. */
export interface PodMarks {
  /** The `svc.io/compartment` label. */
  compartment: string | undefined;
  /** `mls.svc.dev/level`. */
  level: string | undefined;
  /** `mls.svc.dev/compartment`. */
  compartmentNote: string | undefined;
}

/** A value that is not a string (from a crafted review) is kept as its JSON, which no mark parser reads. */
const text = (v: unknown) => (v === undefined || typeof v === "string" ? v : JSON.stringify(v));

export const marksOfPod = (
  meta: { labels?: Record<string, string>; annotations?: Record<string, string> } | undefined,
): PodMarks => ({
  compartment: text(meta?.labels?.[COMPARTMENT_LABEL]),
  level: text(meta?.annotations?.[LEVEL_ANNOTATION]),
  compartmentNote: text(meta?.annotations?.[COMPARTMENT_ANNOTATION]),
});

export interface PodCacheEvents {
  synced(pods: number, ms: number): void;
  error(message: string, retryMs: number): void;
}

const PAGE = 500;
// Short watches: a connection that died silently is noticed within SILENCE_MS, not minutes later.
const WATCH_SECONDS = 60;
const SILENCE_MS = (WATCH_SECONDS + 30) * 1000;
const EXPIRED_AT_ONCE_MS = 10_000;
const BACKOFF_MS = [500, 1_000, 2_000, 5_000, 10_000, 30_000];

export const entryOf = (pod: V1Pod): PodEntry => ({
  uid: pod.metadata?.uid ?? "",
  ...marksOfPod(pod.metadata),
});

export class PodCache {
  private pods = new Map<string, PodEntry>();
  private resourceVersion = "";
  private synced = false;
  /** When the API server last confirmed the cache (a list, a watch event, a watch's normal end). */
  private heard = 0;
  private failures = 0;
  private readonly stopped = new AbortController();
  private readyWaiters: (() => void)[] = [];

  constructor(
    private readonly client: KubeClient,
    private readonly events: PodCacheEvents,
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
   * The pod's entry; undefined when the cache has not heard from the API server for SILENCE_MS (its
   * list or watch failing), so that the caller reads the pod itself rather than trust an old entry.
   */
  get(namespace: string, name: string): PodEntry | undefined {
    if (Date.now() - this.heard > SILENCE_MS) return undefined;
    return this.pods.get(`${namespace}/${name}`);
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
          throw new Error("watch pods: resource version expired (410 Gone) right after a list");
        this.failures = 0;
      } catch (e) {
        if (this.stopped.signal.aborted) return;
        const retryMs = BACKOFF_MS[Math.min(this.failures, BACKOFF_MS.length - 1)] as number;
        this.failures++;
        this.events.error((e as Error).message, retryMs);
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
    const next = new Map<string, PodEntry>();
    let token: string | undefined;
    do {
      const page = await this.client.core.listPodForAllNamespaces({
        limit: PAGE,
        ...(token ? { _continue: token } : {}),
      });
      for (const pod of page.items)
        next.set(`${pod.metadata?.namespace}/${pod.metadata?.name}`, entryOf(pod));
      token = page.metadata?._continue || undefined;
      this.resourceVersion = page.metadata?.resourceVersion ?? "";
    } while (token);
    this.pods = next;
    this.heard = Date.now();
    this.events.synced(next.size, Math.round(performance.now() - started));
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
        () => silence.abort(new Error(`watch pods: no data for ${SILENCE_MS / 1000}s`)),
        SILENCE_MS,
      );
    };
    try {
      quiet();
      const res = await this.client.fetch(`/api/v1/pods?${query}`, { signal: silence.signal });
      if (res.status === 410) return true;
      if (!res.ok) throw new Error(`watch pods: ${res.status} ${(await res.text()).slice(0, 200)}`);
      if (!res.body) throw new Error("watch pods: the response has no body");
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
      throw new Error(`watch pods: ${status.message ?? "error event"}`);
    }
    if (meta?.resourceVersion) this.resourceVersion = meta.resourceVersion;
    this.heard = Date.now();
    if (event.type === "BOOKMARK" || !meta) return false;
    const key = `${meta.namespace}/${meta.name}`;
    if (event.type === "DELETED") this.pods.delete(key);
    else this.pods.set(key, entryOf(event.object as V1Pod));
    return false;
  }
}

interface WatchEvent {
  type: "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK" | "ERROR";
  object?: {
    metadata?: {
      name?: string;
      namespace?: string;
      resourceVersion?: string;
      uid?: string;
      labels?: Record<string, string>;
      annotations?: Record<string, string>;
    };
  };
}
