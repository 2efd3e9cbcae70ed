import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { boundedJson, USER_INFO_LIMITS, userInfoProblem } from "../../proxy/admission/bounded.ts";
import { Gate, type GateLimits, type Ticket } from "../../proxy/admission/gate.ts";

describe("user info the API server never sends is refused", () => {
  const refused = (u: unknown) => userInfoProblem(u);
  const PREFIX = "svc admission: the review's user info is larger than the API server sends (";

  test("ordinary user info passes, also at the limits", () => {
    expect(refused(undefined)).toBeUndefined();
    expect(refused({})).toBeUndefined();
    expect(
      refused({
        username: "alice@example.com",
        uid: "6a9d0f3e",
        groups: ["system:authenticated", "svc:country:us", "svc:sensitivity:ts", "svc:compartment:alpha"],
        extra: { "authentication.kubernetes.io/credential-id": ["JTI=0b7a"] },
      }),
    ).toBeUndefined();
    // A thousand groups of forty characters, an extra value of 16 KiB: large, but what a directory sends.
    const groups = Array.from({ length: 1000 }, (_, i) => `cn=group-${i},ou=groups,dc=example,dc=com`);
    expect(refused({ username: "alice", groups })).toBeUndefined();
    expect(
      refused({ username: "a".repeat(16 * 1024), extra: { k: ["v".repeat(16 * 1024)] } }),
    ).toBeUndefined();
    const keys = Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`k${i}`, ["v"]]));
    expect(refused({ extra: keys })).toBeUndefined();
  });

  test("thousands of groups, megabyte strings, too many extra keys or values, or too much in all", () => {
    expect(refused({ groups: Array.from({ length: 1001 }, (_, i) => `g${i}`) })).toBe(
      `${PREFIX}1001 groups (at most 1000)); refused`,
    );
    expect(refused({ username: "m".repeat(1024 * 1024) })).toBe(
      `${PREFIX}the user name has 1048576 characters (at most 16384)); refused`,
    );
    expect(refused({ uid: "u".repeat(16 * 1024 + 1) })).toContain(
      "the uid has 16385 characters (at most 16384)",
    );
    expect(refused({ groups: ["ok", "g".repeat(20_000)] })).toContain("a group has 20000 characters");
    expect(refused({ extra: { ["k".repeat(20_000)]: [] } })).toContain("a key of extra has 20000 characters");
    expect(refused({ extra: { blob: ["x".repeat(2_000_000)] } })).toContain(
      'a value of extra "blob" has 2000000 characters (at most 16384)',
    );
    const keys = Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, ["v"]]));
    expect(refused({ extra: keys })).toBe(`${PREFIX}more than 64 keys in extra); refused`);
    expect(refused({ extra: { a: Array(600).fill("v"), b: Array(401).fill("v") } })).toContain(
      "more than 1000 values in extra",
    );
    // Within every count and length, but 900 groups of 200 characters: more than 128 KiB in all.
    const long = Array.from({ length: 900 }, (_, i) => `${i}`.padEnd(200, "g"));
    expect(refused({ groups: long })).toBe(`${PREFIX}more than 128 KiB as JSON); refused`);
  });

  test("values of another type are left to the review, unless they are large", () => {
    expect(refused("alice")).toBeUndefined();
    expect(refused({ groups: "x", extra: ["y"], username: 7 })).toBeUndefined();
    // An object where a list belongs is measured all the same.
    const many = Object.fromEntries(Array.from({ length: 20_000 }, (_, i) => [`g${i}`, "x".repeat(8)]));
    expect(refused({ groups: many })).toContain("more than 128 KiB as JSON");
  });

  test("the limits are the documented ones", () => {
    expect(USER_INFO_LIMITS).toEqual({
      groups: 1000,
      extraKeys: 64,
      extraValues: 1000,
      string: 16 * 1024,
      total: 128 * 1024,
    });
  });
});

describe("JSON of a caller's value, read no further than needed", () => {
  test("the same text as JSON.stringify when it fits, else its first max + 1 characters", () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.integer({ min: 0, max: 300 }), (v, max) => {
        const full = JSON.stringify(v);
        const got = boundedJson(v, max) as string;
        if (full.length <= max) expect(got).toBe(full);
        else expect(got).toBe(full.slice(0, max + 1));
      }),
      { numRuns: 2000 },
    );
    expect(boundedJson(undefined, 10)).toBeUndefined();
    expect(boundedJson([undefined, 1], 10)).toBe("[null,1]");
    expect(boundedJson({ a: undefined, b: 1 }, 10)).toBe('{"b":1}');
  });

  test("a million elements, or a megabyte string, are read only as far as the cut", () => {
    let reads = 0;
    const list = new Proxy(
      Array.from({ length: 1_000_000 }, () => "element"),
      {
        get(target, key, receiver) {
          if (typeof key === "string" && /^\d+$/.test(key)) reads++;
          return Reflect.get(target, key, receiver);
        },
      },
    );
    expect(boundedJson(list, 100)).toHaveLength(101);
    expect(reads).toBeLessThan(20);
    expect(boundedJson({ s: "x".repeat(1_000_000) }, 50)).toBe(`{"s":"${"x".repeat(45)}`);
  });
});

describe("the gate: uploads, bytes and reviews being decided, per address and in all", () => {
  const LIMITS: GateLimits = {
    uploadsPerAddress: 3,
    uploads: 5,
    bytesPerAddress: 100,
    bytes: 150,
    decidingPerAddress: 2,
    deciding: 3,
    largeBytes: 40,
    large: 2,
  };
  const drops: string[] = [];
  const enter = (g: Gate, address: string, bytes: number, name: string): Ticket => {
    const t = g.enter(address, bytes, (why) => drops.push(`${name}: ${why}`));
    if (typeof t === "string") throw new Error(t);
    return t;
  };
  const decided = (g: Gate, address: string, bytes = 1) => {
    const t = enter(g, address, bytes, "decided");
    expect(t.received()).toBe(true);
    return t;
  };

  test("a new upload takes the place of the oldest one still arriving from its address", () => {
    drops.length = 0;
    const g = new Gate(LIMITS);
    const [a1, a2, a3] = ["a1", "a2", "a3"].map((n) => enter(g, "A", 1, n)) as Ticket[];
    enter(g, "B", 1, "b1");
    enter(g, "A", 1, "a4");
    expect(drops).toEqual([
      "a1: dropped while still arriving: newer reviews from A needed its place (3 uploads or 0 MiB at once from one address)",
    ]);
    // A dropped upload cannot be received; a received one is no longer dropped.
    expect(a1?.received()).toBe(false);
    expect(a2?.received()).toBe(true);
    enter(g, "A", 1, "a5");
    expect(drops).toHaveLength(1);
    enter(g, "A", 1, "a6");
    expect(drops.at(-1)).toStartWith("a3: ");
    expect(a3?.received()).toBe(false);
    // Bytes too: 98 more from A leave room only once a4 (the count) and a5 (the bytes) are gone; a2, received,
    // keeps its byte.
    enter(g, "A", 98, "a7");
    expect(drops.map((d) => d.slice(0, 2))).toEqual(["a1", "a3", "a4", "a5"]);
    expect(g.load()).toEqual({ uploads: 3, bytes: 1 + 1 + 1 + 98, deciding: 0, large: 1, addresses: 2 });
  });

  test("when uploads in all are full, the oldest anywhere makes room", () => {
    drops.length = 0;
    const g = new Gate(LIMITS);
    for (const [i, address] of ["A", "B", "C", "D", "E"].entries()) enter(g, address, 1, `u${i}`);
    enter(g, "F", 1, "f");
    expect(drops).toEqual([
      "u0: dropped while still arriving: newer reviews needed its place (5 uploads or 0 MiB at once in all)",
    ]);
    expect(g.load().addresses).toBe(5);
  });

  test("room held by reviews already received is not taken: the new upload is refused", () => {
    drops.length = 0;
    const g = new Gate(LIMITS);
    decided(g, "A", 60);
    decided(g, "A", 30);
    expect(g.enter("A", 20, () => {})).toBe(
      "too many large reviews at once from A (0 MiB at once from one address)",
    );
    decided(g, "B", 55);
    expect(g.enter("C", 10, () => {})).toBe("too many large reviews at once (0 MiB at once in all)");
    expect(drops).toEqual([]);
  });

  test("reviews being decided: a few per address and a few in all; done gives everything back", () => {
    const g = new Gate(LIMITS);
    const a1 = decided(g, "A");
    const a2 = decided(g, "A");
    const a3 = decided(g, "A");
    expect(a1.decide()).toBeUndefined();
    expect(a2.decide()).toBeUndefined();
    expect(a3.decide()).toBe("too many reviews at once from A (2 at once from one address)");
    const b1 = decided(g, "B");
    const c1 = decided(g, "C");
    expect(b1.decide()).toBeUndefined();
    expect(c1.decide()).toBe("too many reviews at once");
    a1.done();
    a1.done();
    expect(c1.decide()).toBeUndefined();
    for (const t of [a2, a3, b1, c1]) t.done();
    expect(g.load()).toEqual({ uploads: 0, bytes: 0, deciding: 0, large: 0, addresses: 0 });
  });

  test("large reviews: a few at once in all; the oldest still arriving makes room, one received does not", () => {
    drops.length = 0;
    const g = new Gate(LIMITS);
    const l1 = enter(g, "A", 41, "l1");
    enter(g, "B", 41, "l2");
    // Small reviews are not held back by large ones.
    enter(g, "C", 1, "small").done();
    enter(g, "C", 41, "l3");
    expect(drops).toEqual([
      "l1: dropped while still arriving: a newer large review needed its place (2 reviews over 0 MiB at once in all)",
    ]);
    expect(l1.received()).toBe(false);
    expect(g.load().large).toBe(2);
    // Once both are received (being parsed or decided), a new large review finds no room.
    const received = enter(g, "D", 41, "l4");
    expect(received.received()).toBe(true);
    const other = enter(g, "D", 41, "l5");
    expect(other.received()).toBe(true);
    expect(g.enter("E", 50, () => {})).toBe(
      "too many large reviews at once (2 reviews over 0 MiB at once in all)",
    );
    received.done();
    expect(typeof g.enter("E", 50, () => {})).toBe("object");
  });

  test("an upload dropped late (its deadline) gives its place back once", () => {
    drops.length = 0;
    const g = new Gate(LIMITS);
    const t = enter(g, "A", 10, "late");
    t.drop("not received within 2s of its head");
    t.drop("again");
    t.done();
    expect(drops).toEqual(["late: not received within 2s of its head"]);
    expect(g.load()).toEqual({ uploads: 0, bytes: 0, deciding: 0, large: 0, addresses: 0 });
  });
});
