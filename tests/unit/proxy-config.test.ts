import { describe, expect, test } from "bun:test";
import { ConfigError, validateConfig } from "../../proxy/config/validate.ts";

const base = (listener: Record<string, unknown> = {}, top: Record<string, unknown> = {}) => ({
  spiffe: { workload_socket_path: "unix:///run/spire/agent.sock" },
  listeners: [
    {
      name: "web",
      address: "127.0.0.1:8080",
      mode: "client",
      target: { url: "https://api:8443" },
      ...listener,
    },
  ],
  ...top,
});

function problems(doc: unknown): string[] {
  try {
    validateConfig(doc);
  } catch (e) {
    if (e instanceof ConfigError) return e.problems;
    throw e;
  }
  return [];
}

describe("proxy configuration: defaults (docs/proxy-configuration.md)", () => {
  test("every default is filled in", () => {
    const { config } = validateConfig(base());
    expect(config.metricsAddr).toEqual({ host: "", port: 7600 });
    expect(config.keylog).toBeUndefined();
    expect(config.notary).toEqual({
      enable: false,
      database: undefined,
      witnesses: [],
      pushIntervalMs: 10_000,
    });
    expect(config.witness).toBeUndefined();
    const l = config.listeners[0];
    expect(l).toMatchObject({
      protocol: "http",
      sourceIds: [],
      targetIds: [],
      disableKeepalive: false,
      middlewares: [],
      callerMtls: false,
      targetMtls: true,
    });
    expect(l?.timeouts).toEqual({ readMs: 15_000, writeMs: 60_000, idleMs: 120_000, handshakeMs: 10_000 });
  });

  test("zero or omitted timeouts select the default; zero never disables", () => {
    const { config } = validateConfig(
      base({ timeouts: { read: "0s", write: "0", idle: "90s", handshake: "2s" } }),
    );
    expect(config.listeners[0]?.timeouts).toEqual({
      readMs: 15_000,
      writeMs: 60_000,
      idleMs: 90_000,
      handshakeMs: 2_000,
    });
    expect(config.effective.listeners[0]?.timeouts).toEqual({
      read: "15s",
      write: "60s",
      idle: "90s",
      handshake: "2s",
    });
  });

  test('metricsAddr: empty selects ":7600", "0" disables, loopback binds loopback', () => {
    expect(validateConfig(base({}, { metricsAddr: "" })).config.metricsAddr).toEqual({
      host: "",
      port: 7600,
    });
    expect(validateConfig(base({}, { metricsAddr: "" })).config.effective.metricsAddr).toBe(":7600");
    expect(validateConfig(base({}, { metricsAddr: "0" })).config.metricsAddr).toBeUndefined();
    expect(validateConfig(base({}, { metricsAddr: "127.0.0.1:7600" })).config.metricsAddr).toEqual({
      host: "127.0.0.1",
      port: 7600,
    });
  });

  test("buffer middleware defaults, zero selecting the default", () => {
    const { config } = validateConfig(
      base({
        protocol: "mqtt",
        target: { url: "mqtts://broker:8883" },
        middlewares: [{ type: "buffer", storage: { "max-bytes": 0 } }],
      }),
    );
    expect(config.listeners[0]?.middlewares[0]).toEqual({
      type: "buffer",
      storage: { type: "in-memory", "max-bytes": 33554432, "max-messages": 0, "max-ttl": "0s" },
      "overflow-policy": "reject",
      "reconnect-backoff": { initial: "1s", max: "30s" },
    });
    // Parsed once, for the buffer to run on: milliseconds, and the listener's timeouts it uses.
    expect(config.listeners[0]?.buffer).toEqual({
      maxBytes: 33554432,
      maxMessages: 0,
      maxTtlMs: 0,
      overflow: "reject",
      backoffInitialMs: 1000,
      backoffMaxMs: 30_000,
      idleMs: 120_000,
      connectMs: 15_000,
    });
    expect(validateConfig(base()).config.listeners[0]?.buffer).toBeUndefined();
  });

  test("an admission block alone is a whole configuration: no spiffe section, no listeners", () => {
    const { config, warnings } = validateConfig({
      admission: { cert_file: "/dev/null", key_file: "/dev/null" },
      keylog: "/tmp/keys.log",
    });
    expect(config.workloadApi).toBe("");
    expect(config.listeners).toEqual([]);
    expect(config.admission).toEqual({
      address: { host: "", port: 8443 },
      certFile: "/dev/null",
      keyFile: "/dev/null",
      unlabeledPods: "deny",
      unlabeledReads: "allow",
      kubeconfig: undefined,
    });
    expect(warnings).toEqual([
      "keylog: has no effect without listeners (the admission webhook's TLS is not logged)",
    ]);
  });

  test("zero reconnect-backoff durations select their defaults in the effective configuration", () => {
    const { config } = validateConfig(
      base({
        protocol: "mqtt",
        target: { url: "mqtts://broker:8883" },
        middlewares: [{ type: "buffer", "reconnect-backoff": { initial: "0s", max: "0s" } }],
      }),
    );
    expect(config.listeners[0]?.middlewares[0]).toMatchObject({
      "reconnect-backoff": { initial: "1s", max: "30s" },
    });
  });
});

describe("proxy configuration: every error at once, with path, value and what is allowed", () => {
  const cases: [string, unknown, string[]][] = [
    [
      "witness settings: SPIFFE IDs, https:// URLs, no one twice, the sections they need",
      base(
        { middlewares: [{ type: "witness" }] },
        {
          notary: {
            witnesses: [
              { spiffe_id: "spiffe://example.org/w", url: "http://w:8443" },
              { spiffe_id: "https://example.org/w", url: "https://w:8443" },
              { spiffe_id: "spiffe://example.org/x", url: "https://x:8443" },
              { spiffe_id: "spiffe://example.org/x", url: "https://x:8443" },
            ],
            push_interval: "soon",
          },
        },
      ),
      [
        'notary.witnesses[0].url: "http://w:8443" is not an https:// URL (witnesses and notaries are reached over SPIFFE mTLS)',
        'notary.witnesses[1].spiffe_id: invalid SPIFFE ID "https://example.org/w": the scheme must be spiffe://',
        "notary.witnesses[3].spiffe_id: spiffe://example.org/x is listed twice",
        "notary.witnesses: needs notary.enable: true",
        'notary.push_interval: invalid duration "soon": use a Go duration such as 500ms, 30s, 2m or 1h30m',
        "listeners[0].middlewares[0].type: witness needs the witness section (its database and the logs it follows)",
        "listeners[0].middlewares[0].type: witness takes pushes over SPIFFE mTLS: put it on a server or central listener, not a client one",
      ],
    ],
    [
      "at most 32 witnesses (a verifier reads no more cosignatures with one tree head)",
      base(
        {},
        {
          notary: {
            enable: true,
            database: { path: "/tmp/notary.db" },
            witnesses: Array.from({ length: 33 }, (_, i) => ({
              spiffe_id: `spiffe://example.org/w${i}`,
              url: "https://w:8443",
            })),
          },
        },
      ),
      [
        "notary.witnesses: 33 witnesses: at most 32 (a verifier reads no more cosignatures with one tree head)",
      ],
    ],
    [
      "the witness section: a database whose directory exists, at least one log",
      base({}, { witness: { database: "/no/such/dir/w.db", logs: [] } }),
      [
        'witness.database: directory /no/such/dir of "/no/such/dir/w.db" does not exist (it must exist and be writable)',
        "witness.logs: list at least one log (the SPIFFE ID of a notary to witness)",
      ],
    ],
    [
      "no listeners",
      { spiffe: { workload_socket_path: "unix:///a.sock" }, listeners: [] },
      ["listeners: at least one listener is required (or an admission block)"],
    ],
    [
      "no spiffe section",
      { listeners: base().listeners },
      ["spiffe: required field is missing (listeners, the notary and the witness need a SPIFFE identity)"],
    ],
    [
      "admission block: what is missing or wrong, each named",
      { admission: { address: "8443", unlabeled_pods: "maybe", unlabeled_reads: "__proto__" } },
      [
        "admission.cert_file: required field is missing",
        "admission.key_file: required field is missing",
        'admission.unlabeled_pods: invalid value "maybe" (allowed: deny, allow)',
        'admission.unlabeled_reads: invalid value "__proto__" (allowed: deny, allow)',
        'admission.address: invalid address "8443" (allowed: host:port, or :port for all interfaces)',
      ],
    ],
    [
      "admission block: unreadable files and a bad address",
      {
        admission: {
          address: "nowhere",
          cert_file: "/nonexistent/tls.crt",
          key_file: "/nonexistent/tls.key",
        },
      },
      [
        'admission.address: invalid address "nowhere" (allowed: host:port, or :port for all interfaces)',
        "admission.cert_file: cannot read /nonexistent/tls.crt: ENOENT",
        "admission.key_file: cannot read /nonexistent/tls.key: ENOENT",
      ],
    ],
    [
      "required listener fields",
      { spiffe: { workload_socket_path: "unix:///a.sock" }, listeners: [{ mode: "proxy" }] },
      [
        "listeners[0].name: required field is missing",
        "listeners[0].address: required field is missing",
        'listeners[0].mode: invalid value "proxy" (allowed: client, server, central)',
        "listeners[0].target: required field is missing",
      ],
    ],
    ["empty name", base({ name: "" }), ["listeners[0].name: must not be empty (expected a listener name)"]],
    [
      "bad protocol",
      base({ protocol: "udp" }),
      ['listeners[0].protocol: invalid value "udp" (allowed: http, tcp, mqtt)'],
    ],
    [
      "unknown middleware",
      base({ middlewares: [{ type: "gzip" }] }),
      [
        'listeners[0].middlewares[0].type: unknown middleware type "gzip" (allowed: notary-query, witness, openai, dummy, buffer)',
      ],
    ],
    [
      "bad option type",
      base({ middlewares: [{ type: "openai", allowUnknown: "yes" }] }),
      ['listeners[0].middlewares[0].allowUnknown: expected true or false, got "yes"'],
    ],
    [
      "duplicate names",
      { ...base(), listeners: [base().listeners[0], { ...base().listeners[0], address: ":9090" }] },
      ['listeners[1].name: duplicate name "web" (also listeners[0].name); names must be unique'],
    ],
    [
      "bad address",
      base({ address: "8080" }),
      ['listeners[0].address: invalid address "8080" (allowed: host:port, or :port for all interfaces)'],
    ],
    [
      "bad socket address",
      base({}, { spiffe: { workload_socket_path: "http://agent:8081" } }),
      [
        expect.stringContaining(
          "spiffe.workload_socket_path: invalid Workload API address",
        ) as unknown as string,
      ],
    ],
    [
      "tcp client needs tls://",
      base({ protocol: "tcp", target: { url: "tcp://db:5432" } }),
      [
        'listeners[0].target.url: "tcp://db:5432": a tcp listener in client mode needs a tls://host:port target',
      ],
    ],
    [
      "tcp server needs tcp://",
      base({ mode: "server", protocol: "tcp", target: { url: "tls://db:5432" } }),
      [
        'listeners[0].target.url: "tls://db:5432": a tcp listener in server mode needs a tcp://host:port target',
      ],
    ],
    [
      "mqtt needs an explicit port",
      base({ protocol: "mqtt", target: { url: "mqtts://broker" } }),
      ['listeners[0].target.url: "mqtts://broker": an explicit port is required for mqtt'],
    ],
    [
      "mqtt central needs mqtts://",
      base({ mode: "central", protocol: "mqtt", target: { url: "mqtt://broker:1883" } }),
      [
        'listeners[0].target.url: "mqtt://broker:1883": a mqtt listener in central mode needs a mqtts://host:port target',
      ],
    ],
    [
      "http needs http(s)",
      base({ target: { url: "ftp://files:21" } }),
      ['listeners[0].target.url: "ftp://files:21": an http listener needs an http:// or https:// target'],
    ],
    [
      "not a URL",
      base({ target: { url: "api:8443" } }),
      [expect.stringContaining("listeners[0].target.url:") as unknown as string],
    ],
    [
      "RE2 patterns that do not compile",
      base({
        source: { spiffe_ids: ["^ok$", "(?=x)"] },
        target: { url: "https://api:8443", spiffe_ids: ["[a-"] },
      }),
      [
        'listeners[0].source.spiffe_ids[1]: invalid pattern "(?=x)": error parsing regexp: invalid or unsupported Perl syntax: `(?=` (Go RE2 syntax)',
        'listeners[0].target.spiffe_ids[0]: invalid pattern "[a-": error parsing regexp: missing closing ]: `[a-` (Go RE2 syntax)',
      ],
    ],
    [
      "bad duration",
      base({ timeouts: { read: "15" } }),
      [
        'listeners[0].timeouts.read: invalid duration "15": use a Go duration such as 500ms, 30s, 2m or 1h30m',
      ],
    ],
    [
      "negative duration",
      base({ timeouts: { idle: "-1s" } }),
      ['listeners[0].timeouts.idle: must not be negative, got "-1s"'],
    ],
    [
      "middleware on tcp",
      base({ protocol: "tcp", target: { url: "tls://db:5432" }, middlewares: [{ type: "dummy" }] }),
      [
        "listeners[0].middlewares[0].type: tcp listeners take no middlewares (they carry bytes, not messages)",
      ],
    ],
    [
      "buffer on http",
      base({ middlewares: [{ type: "buffer" }] }),
      ["listeners[0].middlewares[0].type: buffer works on mqtt listeners, not http"],
    ],
    [
      "notary-query without the notary",
      base({ middlewares: [{ type: "notary-query" }] }),
      ["listeners[0].middlewares[0].type: notary-query needs notary.enable: true"],
    ],
    [
      "MQTT buffer limits",
      base({
        protocol: "mqtt",
        target: { url: "mqtts://b:8883" },
        middlewares: [
          {
            type: "buffer",
            storage: { "max-messages": -1 },
            "overflow-policy": "drop-all",
            "reconnect-backoff": { initial: "10s", max: "2s" },
          },
        ],
      }),
      [
        "listeners[0].middlewares[0].storage.max-messages: must not be negative, got -1",
        'listeners[0].middlewares[0].overflow-policy: invalid value "drop-all" (allowed: reject, drop-oldest, drop-newest)',
      ],
    ],
    [
      "backoff max below initial",
      base({
        protocol: "mqtt",
        target: { url: "mqtts://b:8883" },
        middlewares: [{ type: "buffer", "reconnect-backoff": { initial: "10s", max: "2s" } }],
      }),
      [
        "listeners[0].middlewares[0].reconnect-backoff.max: 2s is less than reconnect-backoff.initial 10s; max must be at least initial",
      ],
    ],
    [
      "notary without a database",
      base({}, { notary: { enable: true } }),
      ["notary.database.path: required when notary.enable is true (or notary.database.url for PostgreSQL)"],
    ],
    [
      "notary database directory missing",
      base({}, { notary: { enable: true, database: { path: "/nonexistent-dir/notary.db" } } }),
      [
        'notary.database.path: directory /nonexistent-dir of "/nonexistent-dir/notary.db" does not exist (it must exist and be writable)',
      ],
    ],
    [
      "notary database: both a file and a URL",
      base(
        {},
        { notary: { enable: true, database: { path: "/tmp/n.db", url: "postgres://svc@db/notary" } } },
      ),
      ["notary.database: path (an SQLite file) and url (PostgreSQL) exclude each other: give one"],
    ],
    [
      "notary database URL with a password, which is not echoed",
      base({}, { notary: { enable: true, database: { url: "postgres://svc:hunter2@db/notary" } } }),
      [
        "notary.database.url: holds a password: put it in password_file or the PGPASSWORD environment variable, so that it is never in the configuration or the logs",
      ],
    ],
    [
      "notary database URL of another scheme",
      base({}, { notary: { enable: true, database: { url: "mysql://svc@db/notary" } } }),
      ["notary.database.url: expected postgres://user@host[:port]/database"],
    ],
    [
      "notary database URL without a database name",
      base(
        {},
        {
          notary: {
            enable: true,
            database: { url: "postgresql://svc@db:5432", pool_size: 0, password_file: "/nonexistent/pw" },
          },
        },
      ),
      [
        "notary.database.url: names no database (postgres://user@host/database)",
        'notary.database.password_file: "/nonexistent/pw" does not exist',
        "notary.database.pool_size: 0 is not a whole number from 1 to 100",
      ],
    ],
    [
      "a password file or pool size without a URL",
      base(
        {},
        { notary: { enable: true, database: { path: "/tmp/n.db", password_file: "/tmp/pw", pool_size: 3 } } },
      ),
      [
        "notary.database.password_file: goes with url (PostgreSQL) only",
        "notary.database.pool_size: goes with url (PostgreSQL) only",
      ],
    ],
    [
      "keylog directory missing",
      base({}, { keylog: "/nonexistent-dir/keys.log" }),
      [
        'keylog: directory /nonexistent-dir of "/nonexistent-dir/keys.log" does not exist (it must exist and be writable)',
      ],
    ],
    [
      "buffer storage: sqlite without a path, a path in memory, an unknown type",
      {
        spiffe: { workload_socket_path: "unix:///a.sock" },
        listeners: ["sqlite", "in-memory", "disk"].map((type, i) => ({
          name: `m${i}`,
          protocol: "mqtt",
          address: `127.0.0.1:${1883 + i}`,
          mode: "client",
          target: { url: "mqtts://broker:8883" },
          middlewares: [{ type: "buffer", storage: { type, ...(i === 1 ? { path: "/tmp/b.db" } : {}) } }],
        })),
      },
      [
        'listeners[2].middlewares[0].storage.type: invalid value "disk" (allowed: in-memory, sqlite)',
        "listeners[0].middlewares[0].storage.path: storage.type sqlite needs a path (the database file)",
        "listeners[1].middlewares[0].storage.path: goes with storage.type sqlite only (in-memory keeps no file)",
      ],
    ],
    [
      "buffer storage: one file for two buffers (by its resolved path), a directory that does not exist, :memory:",
      {
        spiffe: { workload_socket_path: "unix:///a.sock" },
        listeners: ["/tmp/b.db", "/tmp/../tmp/b.db", "/nonexistent-dir/b.db", ":memory:"].map((path, i) => ({
          name: `m${i}`,
          protocol: "mqtt",
          address: `127.0.0.1:${1883 + i}`,
          mode: "client",
          target: { url: "mqtts://broker:8883" },
          middlewares: [{ type: "buffer", storage: { type: "sqlite", path } }],
        })),
      },
      [
        'listeners[1].middlewares[0].storage.path: "/tmp/../tmp/b.db" is also listeners[0].middlewares[0].storage.path; each buffer needs a file of its own',
        'listeners[2].middlewares[0].storage.path: directory /nonexistent-dir of "/nonexistent-dir/b.db" does not exist (it must exist and be writable)',
        'listeners[3].middlewares[0].storage.path: ":memory:": expected a file path (SQLite names and URIs are not taken; for a buffer in memory use storage.type in-memory)',
      ],
    ],
    [
      "bad metricsAddr",
      base({}, { metricsAddr: "localhost" }),
      ['metricsAddr: invalid address "localhost" (allowed: host:port, :port, or "0" to disable)'],
    ],
  ];

  test.each(cases)("%s", (_, doc, expected) => {
    expect(problems(doc)).toEqual(expected);
  });

  test("a structural error in one place does not hide rule violations elsewhere", () => {
    const doc = {
      spiffe: { workload_socket_path: "http://agent:8081" },
      listeners: [
        {
          name: "ok-shape",
          address: ":1",
          mode: "client",
          protocol: "tcp",
          target: { url: "tcp://db:5432" },
        },
        { name: "bad-shape", address: ":2", mode: "proxy", target: { url: "https://a:1" } },
        {
          name: "ok-shape",
          address: ":3",
          mode: "server",
          target: { url: "http://a:1" },
          timeouts: { read: "-1s" },
        },
      ],
      metricsAddr: 7600,
    };
    expect(problems(doc)).toEqual([
      'listeners[1].mode: invalid value "proxy" (allowed: client, server, central)',
      'metricsAddr: expected a host:port address, "0" to disable, got 7600',
      expect.stringContaining(
        "spiffe.workload_socket_path: invalid Workload API address",
      ) as unknown as string,
      'listeners[0].target.url: "tcp://db:5432": a tcp listener in client mode needs a tls://host:port target',
      'listeners[2].name: duplicate name "ok-shape" (also listeners[0].name); names must be unique',
      'listeners[2].timeouts.read: must not be negative, got "-1s"',
    ]);
  });

  test("a malformed field does not hide the problems of the listener's other fields", () => {
    expect(
      problems(
        base({
          address: "127.0.0.1:99999",
          mode: "server",
          target: { url: "http://127.0.0.1:2" },
          timeouts: { write: 5, idle: "abc" },
          source: { spiffe_ids: ["(?=x)"] },
        }),
      ),
    ).toEqual([
      "listeners[0].timeouts.write: expected a Go duration such as 60s, got 5",
      'listeners[0].address: invalid address "127.0.0.1:99999" (allowed: host:port, or :port for all interfaces)',
      'listeners[0].source.spiffe_ids[0]: invalid pattern "(?=x)": error parsing regexp: invalid or unsupported Perl syntax: `(?=` (Go RE2 syntax)',
      'listeners[0].timeouts.idle: invalid duration "abc": use a Go duration such as 500ms, 30s, 2m or 1h30m',
    ]);
    // A middleware of the wrong shape is reported; the well-formed buffer beside it is still checked.
    expect(
      problems(
        base({
          protocol: "mqtt",
          target: { url: "mqtts://b:8883" },
          connection: { disable_keepalive: "yes" },
          middlewares: [
            { type: "dummy", message: 5 },
            {
              type: "buffer",
              storage: { "max-ttl": "-1s" },
              "reconnect-backoff": { initial: "10s", max: "2s" },
            },
          ],
        }),
      ),
    ).toEqual([
      'listeners[0].connection.disable_keepalive: expected true or false, got "yes"',
      "listeners[0].middlewares[0].message: expected a string, got 5",
      'listeners[0].middlewares[1].storage.max-ttl: must not be negative, got "-1s"',
      "listeners[0].middlewares[1].reconnect-backoff.max: 2s is less than reconnect-backoff.initial 10s; max must be at least initial",
    ]);
  });

  test("the error message lists every problem, one per line", () => {
    let message = "";
    try {
      validateConfig(base({ address: "x", protocol: "tcp", target: { url: "tcp://db:1" } }));
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toBe(
      'invalid configuration (2 problems):\n  listeners[0].address: invalid address "x" (allowed: host:port, or :port for all interfaces)\n  listeners[0].target.url: "tcp://db:1": a tcp listener in client mode needs a tls://host:port target',
    );
  });
});

describe("proxy configuration: warnings", () => {
  test("unknown fields are named, including a misspelt spiffe_ids", () => {
    const { warnings } = validateConfig(
      base(
        { source: { spiffe_id: ["x"] }, middlewares: [{ type: "dummy", mesage: "hi" }] },
        { metrics: ":9" },
      ),
    );
    expect(warnings).toEqual([
      "listeners[0].source.spiffe_id: unknown field, ignored (check its spelling)",
      "listeners[0].middlewares[0].mesage: unknown field, ignored (check its spelling)",
      "metrics: unknown field, ignored (check its spelling)",
    ]);
  });

  test("settings without effect are pointed out", () => {
    expect(
      validateConfig(base({ target: { url: "http://api:8080" }, source: { spiffe_ids: ["^x$"] } })).warnings,
    ).toEqual([
      "listeners[0].target.url: http://api:8080 is plain HTTP; client mode does not upgrade it to SPIFFE mTLS (use https:// for mTLS)",
      "listeners[0].source.spiffe_ids: has no effect in client mode, where callers connect in plaintext (bind the listener to loopback)",
    ]);
    const both = base(
      { middlewares: [{ type: "openai" }, { type: "notary-query" }] },
      { notary: { enable: true, database: { path: "/tmp/n.db" } } },
    );
    expect(
      validateConfig(base({ target: { url: "http://api:8080", spiffe_ids: ["^x$"] } })).warnings,
    ).toContain(
      "listeners[0].target.spiffe_ids: has no effect: the target http://api:8080 is not spoken to over SPIFFE mTLS (use https://, tls:// or mqtts:// for that)",
    );
    expect(validateConfig(both).warnings).toEqual([
      "listeners[0].middlewares: openai comes before notary-query, so notary queries are refused by openai's path filter (put notary-query first)",
    ]);
  });
});

describe("proxy configuration: every problem and every warning in one run", () => {
  /** The error a document gets: its problems, and the warnings it carries. */
  const refusal = (doc: unknown) => {
    try {
      validateConfig(doc);
    } catch (e) {
      if (e instanceof ConfigError) return e;
      throw e;
    }
    throw new Error("accepted");
  };

  test("eight mistakes in one file: all eight, with the warnings, each with its path", () => {
    const e = refusal({
      spiffe: { endpoint_socket: "unix:///run/spire/agent.sock" },
      metricsAddr: "127.0.0.1:99999",
      listeners: [
        {
          name: "web",
          address: "127.0.0.1:99999",
          mode: "client",
          target: { url: "https://api:8443", spiffe_ids: ["^spiffe://example.org/(unclosed$"] },
          middlewares: [{ type: "openai" }, { type: "notary-query" }],
        },
        {
          name: "web",
          address: "127.0.0.1:8081",
          mode: "server",
          sorce: { spiffe_ids: ["^spiffe://example\\.org/ns/a/sa/b$"] },
          target: { url: "http://127.0.0.1:9000" },
          timeouts: { read: "-5s" },
        },
        // A malformed mode hides none of the listener's other mistakes.
        {
          name: "web",
          address: "localhost",
          mode: "sideways",
          target: { url: "http://x:1", spiffe_ids: ["("] },
        },
      ],
    });
    expect(e.problems).toEqual([
      "spiffe.workload_socket_path: required field is missing",
      'listeners[2].mode: invalid value "sideways" (allowed: client, server, central)',
      'metricsAddr: invalid address "127.0.0.1:99999" (allowed: host:port, :port, or "0" to disable)',
      'listeners[0].address: invalid address "127.0.0.1:99999" (allowed: host:port, or :port for all interfaces)',
      expect.stringMatching(
        /^listeners\[0\]\.target\.spiffe_ids\[0\]: invalid pattern "\^spiffe:\/\/example\.org\/\(unclosed\$"/,
      ),
      "listeners[0].middlewares[1].type: notary-query needs notary.enable: true",
      'listeners[1].name: duplicate name "web" (also listeners[0].name); names must be unique',
      'listeners[1].timeouts.read: must not be negative, got "-5s"',
      'listeners[2].name: duplicate name "web" (also listeners[0].name); names must be unique',
      'listeners[2].address: invalid address "localhost" (allowed: host:port, or :port for all interfaces)',
      expect.stringMatching(/^listeners\[2\]\.target\.spiffe_ids\[0\]: invalid pattern "\("/),
    ]);
    expect(e.warnings).toEqual([
      "spiffe.endpoint_socket: unknown field, ignored (check its spelling)",
      "listeners[1].sorce: unknown field, ignored (check its spelling)",
      "listeners[0].middlewares: openai comes before notary-query, so notary queries are refused by openai's path filter (put notary-query first)",
      "listeners[1].source.spiffe_ids: empty: this server listener accepts every workload of the trust domain (list the SPIFFE IDs that may call it)",
    ]);
    expect(e.message).toStartWith("invalid configuration (11 problems, 4 warnings):\n");
    expect(e.message).toContain(
      "\n  warning: listeners[1].sorce: unknown field, ignored (check its spelling)",
    );
  });

  test("a server or central listener that names no callers is pointed out; a client one is not", () => {
    for (const mode of ["server", "central"])
      expect(validateConfig(base({ mode, target: { url: "http://api:8080" } })).warnings).toContain(
        `listeners[0].source.spiffe_ids: empty: this ${mode} listener accepts every workload of the trust domain (list the SPIFFE IDs that may call it)`,
      );
    expect(validateConfig(base()).warnings).toEqual([]);
    expect(
      validateConfig(
        base({ mode: "server", target: { url: "http://api:8080" }, source: { spiffe_ids: ["^x$"] } }),
      ).warnings,
    ).toEqual([]);
  });
});
