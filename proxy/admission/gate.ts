/**
 * The admission webhook's bounds on work in progress (docs/admission.md, "The webhook under load and
 * attack"), per client address and in all, in two stages:
 *
 * - A review being received holds an upload: one of a few per address, and its announced size in bytes
 *   until it is answered. When a new upload finds no room, the oldest uploads still arriving (of its own
 *   address first) are dropped to make it: the API server writes a review at once, so the oldest upload is
 *   the stalled one, and stalled uploads cannot keep out reviews, from the same address or another.
 * - A large review (one announced over `largeBytes`) also holds one of a few places for large reviews in
 *   all, until it is answered: reading and parsing megabytes of JSON is what costs the webhook time, so
 *   only a few are read at once, and a review of ordinary size never waits behind more than those. The
 *   oldest large upload still arriving makes room for a new one, as above.
 * - A review whose body is in takes a slot to be decided. These are never dropped; when none is free the
 *   review is answered 429.
 */
export interface GateLimits {
  /** Uploads arriving at once, from one address and in all. */
  uploadsPerAddress: number;
  uploads: number;
  /** Announced bytes of reviews being received or decided, from one address and in all. */
  bytesPerAddress: number;
  bytes: number;
  /** Reviews being decided at once, from one address and in all. */
  decidingPerAddress: number;
  deciding: number;
  /** A review announced larger than this is large; at most `large` of them are held at once, in all. */
  largeBytes: number;
  large: number;
}

export interface Ticket {
  /** The body is in: the upload can no longer be dropped. False when it was dropped already. */
  received(): boolean;
  /** Takes a slot to decide: undefined, or why there is none. */
  decide(): string | undefined;
  /** Drops the upload (it is late): its holder is told through onDrop. */
  drop(why: string): void;
  /** Gives everything back; again is harmless. */
  done(): void;
}

interface Entry {
  uploads: Set<Upload>;
  bytes: number;
  deciding: number;
}

interface Upload {
  address: string;
  bytes: number;
  drop(why: string): void;
}

export interface GateLoad {
  uploads: number;
  bytes: number;
  deciding: number;
  large: number;
  addresses: number;
}

export class Gate {
  private readonly byAddress = new Map<string, Entry>();
  /** Every upload still arriving, oldest first (a Set keeps insertion order). */
  private readonly uploads = new Set<Upload>();
  private bytes = 0;
  private deciding = 0;
  /** Large reviews held (arriving, being parsed or decided), and those of them still arriving, oldest first. */
  private large = 0;
  private readonly largeUploads = new Set<Upload>();

  constructor(readonly limits: GateLimits) {}

  /**
   * An upload of `bytes` (as announced) from `address`: a ticket, or why there is no room (the room is
   * held by reviews being decided). Dropping an older upload calls its onDrop with the reason.
   */
  enter(address: string, bytes: number, onDrop: (why: string) => void): Ticket | string {
    const L = this.limits;
    const large = bytes > L.largeBytes;
    if (large) {
      for (const oldest of this.largeUploads) {
        if (this.large < L.large) break;
        oldest.drop(
          `dropped while still arriving: a newer large review needed its place (${L.large} reviews over ${mib(L.largeBytes)} at once in all)`,
        );
      }
      if (this.large >= L.large)
        return `too many large reviews at once (${L.large} reviews over ${mib(L.largeBytes)} at once in all)`;
    }
    const entry = this.byAddress.get(address) ?? { uploads: new Set<Upload>(), bytes: 0, deciding: 0 };
    this.byAddress.set(address, entry);
    const full = () => entry.uploads.size >= L.uploadsPerAddress || entry.bytes + bytes > L.bytesPerAddress;
    for (const oldest of entry.uploads) {
      if (!full()) break;
      oldest.drop(
        `dropped while still arriving: newer reviews from ${address} needed its place (${L.uploadsPerAddress} uploads or ${mib(L.bytesPerAddress)} at once from one address)`,
      );
    }
    if (full()) {
      this.forget(address, entry);
      return `too many large reviews at once from ${address} (${mib(L.bytesPerAddress)} at once from one address)`;
    }
    const fullAll = () => this.uploads.size >= L.uploads || this.bytes + bytes > L.bytes;
    for (const oldest of this.uploads) {
      if (!fullAll()) break;
      oldest.drop(
        `dropped while still arriving: newer reviews needed its place (${L.uploads} uploads or ${mib(L.bytes)} at once in all)`,
      );
    }
    if (fullAll()) {
      this.forget(address, entry);
      return `too many large reviews at once (${mib(L.bytes)} at once in all)`;
    }

    // Dropping may have forgotten this address's entry (its last upload gone): it holds the new one.
    this.byAddress.set(address, entry);
    let state: "uploading" | "received" | "deciding" | "done" = "uploading";
    const upload: Upload = {
      address,
      bytes,
      drop: (why) => {
        if (state !== "uploading") return;
        ticket.done();
        onDrop(why);
      },
    };
    entry.uploads.add(upload);
    entry.bytes += bytes;
    this.uploads.add(upload);
    this.bytes += bytes;
    if (large) {
      this.large++;
      this.largeUploads.add(upload);
    }
    const ticket: Ticket = {
      received: () => {
        if (state !== "uploading") return false;
        state = "received";
        entry.uploads.delete(upload);
        this.uploads.delete(upload);
        this.largeUploads.delete(upload);
        return true;
      },
      decide: () => {
        if (state !== "received") return "not received";
        if (entry.deciding >= L.decidingPerAddress)
          return `too many reviews at once from ${address} (${L.decidingPerAddress} at once from one address)`;
        if (this.deciding >= L.deciding) return "too many reviews at once";
        state = "deciding";
        entry.deciding++;
        this.deciding++;
        return undefined;
      },
      drop: (why) => upload.drop(why),
      done: () => {
        if (state === "done") return;
        if (state === "uploading") {
          entry.uploads.delete(upload);
          this.uploads.delete(upload);
          this.largeUploads.delete(upload);
        }
        if (large) this.large--;
        if (state === "deciding") {
          entry.deciding--;
          this.deciding--;
        }
        state = "done";
        entry.bytes -= bytes;
        this.bytes -= bytes;
        this.forget(address, entry);
      },
    };
    return ticket;
  }

  /** What is held now (for tests and diagnostics). */
  load(): GateLoad {
    return {
      uploads: this.uploads.size,
      bytes: this.bytes,
      deciding: this.deciding,
      large: this.large,
      addresses: this.byAddress.size,
    };
  }

  private forget(address: string, entry: Entry): void {
    if (entry.uploads.size === 0 && entry.bytes === 0 && entry.deciding === 0) this.byAddress.delete(address);
  }
}

const mib = (n: number) => `${Math.round((n / (1024 * 1024)) * 10) / 10} MiB`;
