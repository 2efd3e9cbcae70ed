/**
 * Connection accounting for a listener: requests in flight per connection, the idle timeout (close a
 * connection that has had no request in flight for `idleMs`), the head timeout (a request head must
 * arrive whole within `head.ms` of its first bytes, or `head.timedOut` answers and closes), and draining
 * at shutdown. A connection is whatever requests belong to: the TCP/TLS socket for HTTP/1.1, the session
 * for HTTP/2 (whose raw socket never carries an HTTP/1 request and must not be timed out as idle).
 */
interface Connection {
  active: number;
  /** A request whose body has not been read to its end: bytes now are that body, not a new head. */
  reading: boolean;
  timer: ReturnType<typeof setTimeout> | undefined;
  head: ReturnType<typeof setTimeout> | undefined;
  destroy(): void;
}

export class Connections {
  private readonly byKey = new Map<object, Connection>();

  constructor(
    private readonly idleMs: number,
    private readonly onOpen: () => void = () => {},
    private readonly head?: { ms: number; timedOut(key: object): void },
  ) {}

  /** Starts accounting for a connection; `onClose` registers the cleanup for when it closes. */
  open(key: object, destroy: () => void, onClose: (cleanup: () => void) => void): void {
    const c: Connection = { active: 0, reading: false, timer: undefined, head: undefined, destroy };
    this.byKey.set(key, c);
    this.onOpen();
    this.idle(c);
    onClose(() => {
      clearTimeout(c.timer);
      clearTimeout(c.head);
      this.byKey.delete(key);
    });
  }

  /** Bytes came in: with no request in flight, they begin a head, which must be whole in time. */
  bytesArrived(key: object): void {
    const c = this.byKey.get(key);
    const head = this.head;
    if (!c || !head || c.active > 0 || c.reading || c.head) return;
    c.head = setTimeout(() => head.timedOut(key), head.ms);
  }

  /** The request's body was read to its end (`requestStarted` marks it unread). */
  requestRead(key: object): void {
    const c = this.byKey.get(key);
    if (c) c.reading = false;
  }

  requestStarted(key: object): void {
    const c = this.byKey.get(key);
    if (!c) return;
    c.active++;
    c.reading = true;
    clearTimeout(c.timer);
    clearTimeout(c.head);
    c.head = undefined;
  }

  requestEnded(key: object): void {
    const c = this.byKey.get(key);
    if (!c) return;
    c.active = Math.max(0, c.active - 1);
    this.idle(c);
  }

  private idle(c: Connection): void {
    clearTimeout(c.timer);
    if (c.active === 0) c.timer = setTimeout(() => c.destroy(), this.idleMs);
  }

  /** Closes idle connections now, waits up to `drainMs` for requests in flight, then closes the rest. */
  async drain(drainMs: number): Promise<void> {
    for (const c of this.byKey.values()) if (c.active === 0) c.destroy();
    const deadline = Date.now() + drainMs;
    while ([...this.byKey.values()].some((c) => c.active > 0) && Date.now() < deadline) await Bun.sleep(20);
    for (const c of this.byKey.values()) c.destroy();
  }
}
