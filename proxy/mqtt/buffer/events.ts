/** Why the publish buffer let a message go without delivering it. */
export type DropReason = "overflow" | "oversized" | "expired" | "rejected" | "refused" | "storage";

/** What a listener's publish buffer reports to metrics. */
export interface BufferEvents {
  /** Messages and payload bytes entering (positive) or leaving (negative) the buffer. */
  depth(messages: number, bytes: number): void;
  dropped(reason: DropReason): void;
  /** A message the target acknowledged (QoS 1) or that was written to it (QoS 0). */
  delivered(): void;
  /** A connection attempt to the target: ok once it acknowledged CONNECT, else failed. */
  connect(result: "ok" | "failed"): void;
  /** Messages and payload bytes written to (positive) or removed from (negative) storage.path. */
  stored(messages: number, bytes: number): void;
  /** Messages read back from storage.path at start, to be delivered. */
  replayed(messages: number): void;
  /** A write to storage.path failed (its publishes were refused). */
  storageFailed(): void;
}
