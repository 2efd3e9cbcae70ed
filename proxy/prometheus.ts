/**
 * The few Prometheus metric types svc-proxy exposes (counters, gauges, histograms, with labels) and the
 * text exposition format 0.0.4. Small on purpose: a general client library costs about 10 MB of resident
 * memory in a compiled proxy (docs/benchmarks.md). Children are per label set; callers on a hot path
 * bind them once with labels().
 */
type Labels = Record<string, string>;

interface Family {
  render(out: string[]): void;
}

export class Registry {
  readonly contentType = "text/plain; version=0.0.4; charset=utf-8";
  private readonly families: Family[] = [];

  add(f: Family): void {
    this.families.push(f);
  }

  metrics(): string {
    const out: string[] = [];
    for (const f of this.families) f.render(out);
    return out.join("");
  }
}

interface Options {
  name: string;
  help: string;
  labelNames?: readonly string[];
  registers: Registry[];
}

abstract class Metric<Child> implements Family {
  protected readonly children = new Map<string, { labels: string; child: Child }>();
  protected abstract readonly type: string;

  constructor(protected readonly o: Options) {
    for (const r of o.registers) r.add(this);
    // A metric without labels has its one series from the start, as Prometheus clients do.
    if (!o.labelNames?.length) this.labels({});
  }

  protected abstract create(): Child;

  /** The series for these label values, made on first use. */
  labels(values: Labels): Child {
    const names = this.o.labelNames ?? [];
    let key = "";
    for (const n of names) key += `${values[n] ?? ""}\u0000`;
    let entry = this.children.get(key);
    if (!entry) {
      const rendered = names.map((n) => `${n}="${escapeValue(values[n] ?? "")}"`).join(",");
      entry = { labels: rendered, child: this.create() };
      this.children.set(key, entry);
    }
    return entry.child;
  }

  render(out: string[]): void {
    out.push(`# HELP ${this.o.name} ${this.o.help.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")}\n`);
    out.push(`# TYPE ${this.o.name} ${this.type}\n`);
    for (const { labels, child } of this.children.values()) this.series(out, labels, child);
  }

  protected abstract series(out: string[], labels: string, child: Child): void;
}

function escapeValue(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

const braces = (labels: string) => (labels ? `{${labels}}` : "");
const num = (n: number) => (n === Number.POSITIVE_INFINITY ? "+Inf" : String(n));

export class ValueChild {
  value = 0;
  inc(n = 1): void {
    this.value += n;
  }
  set(n: number): void {
    this.value = n;
  }
}

export class Counter extends Metric<ValueChild> {
  protected readonly type: string = "counter";
  protected create(): ValueChild {
    return new ValueChild();
  }
  inc(labels: Labels = {}, n = 1): void {
    this.labels(labels).inc(n);
  }
  protected series(out: string[], labels: string, c: ValueChild): void {
    out.push(`${this.o.name}${braces(labels)} ${num(c.value)}\n`);
  }
}

export class Gauge extends Counter {
  protected override readonly type = "gauge";
  set(labels: Labels | number, n?: number): void {
    if (typeof labels === "number") this.labels({}).set(labels);
    else this.labels(labels).set(n ?? 0);
  }
}

export class HistogramChild {
  readonly counts: number[];
  sum = 0;
  count = 0;
  constructor(private readonly buckets: readonly number[]) {
    this.counts = buckets.map(() => 0);
  }
  observe(v: number): void {
    this.sum += v;
    this.count++;
    const b = this.buckets;
    for (let i = 0; i < b.length; i++)
      if (v <= (b[i] as number)) {
        this.counts[i] = (this.counts[i] as number) + 1;
        return;
      }
  }
}

export class Histogram extends Metric<HistogramChild> {
  protected readonly type = "histogram";
  // biome-ignore lint/complexity/noUselessConstructor: it makes buckets a required option
  constructor(o: Options & { buckets: readonly number[] }) {
    super(o);
  }
  private get buckets(): readonly number[] {
    return (this.o as Options & { buckets: readonly number[] }).buckets;
  }
  protected create(): HistogramChild {
    return new HistogramChild(this.buckets);
  }
  observe(labels: Labels | number, v?: number): void {
    if (typeof labels === "number") this.labels({}).observe(labels);
    else this.labels(labels).observe(v ?? 0);
  }
  protected series(out: string[], labels: string, h: HistogramChild): void {
    const sep = labels ? `${labels},` : "";
    let cumulative = 0;
    this.buckets.forEach((b, i) => {
      cumulative += h.counts[i] as number;
      out.push(`${this.o.name}_bucket{${sep}le="${num(b)}"} ${cumulative}\n`);
    });
    out.push(`${this.o.name}_bucket{${sep}le="+Inf"} ${h.count}\n`);
    out.push(`${this.o.name}_sum${braces(labels)} ${num(h.sum)}\n`);
    out.push(`${this.o.name}_count${braces(labels)} ${h.count}\n`);
  }
}
