/**
 * A copy of `src[start..end)` of its own. A Buffer's `slice` is a view of the same memory (unlike a
 * Uint8Array's), so bytes kept past the moment, out of a buffer that will be reused or is large, are
 * copied with this.
 */
export const copyOf = (src: Uint8Array, start: number, end: number): Uint8Array =>
  Uint8Array.prototype.slice.call(src, start, end);

/** Whether `src` holds the octets of `kept` from `start` on (and has that many). */
export function holdsAt(src: Uint8Array, start: number, kept: Uint8Array): boolean {
  if (src.length - start < kept.length) return false;
  for (let i = 0; i < kept.length; i++) if (kept[i] !== src[start + i]) return false;
  return true;
}
