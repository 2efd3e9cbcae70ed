/** Exponential backoff (Workload API appendix A): doubles after each failure, resets on success. */
export class Backoff {
  private next: number;
  constructor(
    private readonly initialMs = 200,
    private readonly maxMs = 30_000,
  ) {
    this.next = initialMs;
  }
  delay(): number {
    const d = this.next;
    this.next = Math.min(this.next * 2, this.maxMs);
    return d;
  }
  reset(): void {
    this.next = this.initialMs;
  }
}
