import { describe, expect, test } from "bun:test";
import { Counter, Gauge, Histogram, Registry } from "../../proxy/prometheus.ts";

describe("Prometheus text exposition", () => {
  test("counters, gauges and histograms render as Prometheus 0.0.4 text", () => {
    const registry = new Registry();
    const c = new Counter({
      name: "c_total",
      help: "a counter",
      labelNames: ["l", "code"],
      registers: [registry],
    });
    const g = new Gauge({ name: "g", help: "a gauge", registers: [registry] });
    const h = new Histogram({
      name: "h_seconds",
      help: "a histogram",
      buckets: [0.1, 1],
      registers: [registry],
    });
    c.inc({ l: "a", code: "200" });
    c.labels({ l: "a", code: "200" }).inc(2);
    c.inc({ l: 'q"u\\o\nte', code: "502" }, 5);
    g.set(1.5);
    for (const v of [0.05, 0.5, 0.5, 7]) h.observe(v);
    expect(registry.metrics()).toBe(
      [
        "# HELP c_total a counter",
        "# TYPE c_total counter",
        'c_total{l="a",code="200"} 3',
        'c_total{l="q\\"u\\\\o\\nte",code="502"} 5',
        "# HELP g a gauge",
        "# TYPE g gauge",
        "g 1.5",
        "# HELP h_seconds a histogram",
        "# TYPE h_seconds histogram",
        'h_seconds_bucket{le="0.1"} 1',
        'h_seconds_bucket{le="1"} 3',
        'h_seconds_bucket{le="+Inf"} 4',
        "h_seconds_sum 8.05",
        "h_seconds_count 4",
        "",
      ].join("\n"),
    );
  });

  test("a labelled metric has no series until first used; label names like __proto__ are plain keys", () => {
    const registry = new Registry();
    const c = new Counter({ name: "x_total", help: "h", labelNames: ["reason"], registers: [registry] });
    expect(registry.metrics()).toBe("# HELP x_total h\n# TYPE x_total counter\n");
    c.inc({ reason: "__proto__" });
    c.inc({ reason: "constructor" });
    expect(registry.metrics()).toContain('x_total{reason="__proto__"} 1\n');
    expect(registry.metrics()).toContain('x_total{reason="constructor"} 1\n');
  });
});
