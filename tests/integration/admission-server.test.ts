import "reflect-metadata";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { type ConnectionOptions, connect } from "node:tls";
import { DevCa } from "../../lib/dev/ca.ts";
import { derToPem } from "../../lib/spiffe/cert.ts";
import type { AdmissionRequest } from "../../proxy/admission/review.ts";
import { type AdmissionServer, GATE_LIMITS, startAdmissionServer } from "../../proxy/admission/server.ts";

/**
 * The admission webhook's server under attack from the network (docs/admission.md, "The webhook under
 * load and attack"), over real TLS on loopback: uploads announced large and stalled, heads dripped a byte
 * at a time and reviews with megabytes of user info, while well-formed reviews from the attacker's own
 * address and from another are all decided. The decision is a fake: the server is the thing under test.
 * Several loopback addresses (127.0.0.x) stand for several clients.
 */
const ATTACKER = "127.0.0.1";
const OTHER = "127.0.0.2";
const CRAFTER = "127.0.0.3";

let server: AdmissionServer;
let caPem: string;
const decided: string[] = [];
const reports: string[] = [];
/** Uploads the server held when it made its first report (the first one turned away). */
let heldAtFirstReport = -1;
let firstReported = () => {};
const firstReport = new Promise<void>((resolve) => {
  firstReported = resolve;
});

beforeAll(async () => {
  const ca = await DevCa.open("example.org");
  const leaf = await ca.issue({ uris: ["spiffe://example.org/admission"], ttlMs: 3_600_000 });
  caPem = derToPem(ca.caDer);
  server = startAdmissionServer({
    address: { host: "127.0.0.1", port: 0 },
    tls: { cert: derToPem(leaf.certDer), key: derToPem(leaf.keyDer, "PRIVATE KEY") },
    decide: async (request: AdmissionRequest) => {
      decided.push(request.uid);
      return { allowed: true, decision: "allowed", message: "cleared" };
    },
    authorize: async (spec) => ({
      answer: spec.resourceAttributes?.name === "foreign" ? "deny" : "none",
      reason: spec.resourceAttributes?.name === "foreign" ? "another compartment" : "no opinion",
    }),
    ready: () => true,
    onBadRequest: (message) => {
      reports.push(message);
      if (heldAtFirstReport < 0) heldAtFirstReport = server.load().uploads;
      firstReported();
    },
  });
});
afterAll(async () => {
  await server.stop();
});

interface Conn {
  write(data: string): void;
  /** Everything the server sent, as latin1. */
  received(): string;
  /** Settles when the connection is closed (by either side). */
  closed: Promise<void>;
  isClosed(): boolean;
  /** Settles once what was received passes `check`, or the connection closes. */
  until(check: (received: string) => boolean): Promise<void>;
  /** Settles once the TLS handshake is done. */
  up: Promise<void>;
}

/** A TLS connection to the webhook from `localAddress`; the certificate is checked against the test CA. */
function open(localAddress: string): Conn {
  let got = "";
  let done = false;
  const waiting = new Set<() => void>();
  // localAddress is passed on to the TCP connection (node:tls's types leave it out).
  const options: ConnectionOptions & { localAddress: string } = {
    host: "127.0.0.1",
    port: server.port,
    localAddress,
    ca: caPem,
    // The leaf names a SPIFFE ID, not 127.0.0.1: the chain is checked, the name is not.
    checkServerIdentity: () => undefined,
  };
  const socket = connect(options);
  socket.on("data", (d: Buffer) => {
    got += d.toString("latin1");
    for (const w of waiting) w();
  });
  socket.on("error", () => {});
  const closed = new Promise<void>((resolve) =>
    socket.once("close", () => {
      done = true;
      resolve();
      for (const w of waiting) w();
    }),
  );
  const until = (check: (received: string) => boolean) =>
    new Promise<void>((resolve) => {
      const w = () => {
        if (!done && !check(got)) return;
        waiting.delete(w);
        resolve();
      };
      waiting.add(w);
      w();
    });
  const up = new Promise<void>((resolve, reject) => {
    socket.once("secureConnect", () => resolve());
    socket.once("close", () => reject(new Error("closed before the handshake")));
  });
  up.catch(() => {});
  return {
    write: (data) => {
      if (!socket.destroyed) socket.write(data);
    },
    received: () => got,
    closed,
    isClosed: () => done,
    until,
    up,
  };
}

const head = (length: number, close = true, path = "/validate") =>
  `POST ${path} HTTP/1.1\r\nHost: svc-admission.svc-system.svc\r\nContent-Type: application/json\r\n` +
  `Content-Length: ${length}\r\n${close ? "Connection: close\r\n" : ""}\r\n`;

const review = (uid: string, userInfo: unknown = { username: "alice", groups: ["system:authenticated"] }) =>
  JSON.stringify({
    apiVersion: "admission.k8s.io/v1",
    kind: "AdmissionReview",
    request: {
      uid,
      resource: { group: "", version: "v1", resource: "pods" },
      subResource: "exec",
      operation: "CONNECT",
      namespace: "alpha",
      name: "a",
      userInfo,
    },
  });

/** POSTs one review in one write (as the API server does), reads the answer to the server's close. */
async function post(
  localAddress: string,
  body: string,
  path = "/validate",
): Promise<{ status: number; body: string }> {
  const c = open(localAddress);
  await c.up;
  c.write(head(Buffer.byteLength(body), true, path) + body);
  await c.closed;
  const text = c.received();
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
  return { status, body: Buffer.from(text.slice(text.indexOf("\r\n\r\n") + 4), "latin1").toString("utf8") };
}

describe("the admission server under attack", () => {
  test("stalled uploads, dripped heads and megabytes of user info do not keep out reviews from the attacker's address or another", async () => {
    const MAX_BODY = 4 * 1024 * 1024;
    // Hundreds of uploads announced at the largest size and stalled after a few bytes, and small ones
    // stalled likewise: far more than one address may hold (16 MiB, 32 uploads), and more than the 512
    // reviews decided at once in all (which a slot taken before the body would let them fill).
    const bigStalls = Array.from({ length: 400 }, () => open(ATTACKER));
    const smallStalls = Array.from({ length: 200 }, () => open(ATTACKER));
    const ignore = () => {};
    for (const c of bigStalls)
      void c.up.then(() => c.write(`${head(MAX_BODY, false)}{"apiVersion":`), ignore);
    for (const c of smallStalls) void c.up.then(() => c.write(`${head(2_000, false)}{"kind":`), ignore);
    // Heads that never end: a byte every quarter second, for as long as the server keeps them.
    const drips = Array.from({ length: 40 }, () => open(ATTACKER));
    const dripping = setInterval(() => {
      for (const c of drips) c.write("a");
    }, 250);
    for (const c of drips)
      void c.up.then(() => c.write("POST /validate HTTP/1.1\r\nHost: svc-admission\r\nX-Slow: "), ignore);
    const attack = [...bigStalls, ...smallStalls, ...drips];
    const attackOpen = () => attack.some((c) => !c.isClosed());

    // Reviews whose user info no API server sends, from a third address, all at once.
    const crafted = [
      review("crafted-groups", {
        username: "mallory",
        groups: Array.from({ length: 200_000 }, (_, i) => `group-${i}`),
      }),
      review("crafted-extra", {
        username: "mallory",
        extra: { "example.com/blob": ["x".repeat(2_000_000)] },
      }),
      review("crafted-name", { username: "m".repeat(1_000_000) }),
      review("crafted-keys", {
        username: "mallory",
        extra: Object.fromEntries(Array.from({ length: 50_000 }, (_, i) => [`k${i}`, ["v"]])),
      }),
    ];
    const craftedAnswers = Promise.all(crafted.map((body) => post(CRAFTER, body)));

    // Well-formed reviews, one after another from each address, from the first upload turned away (the
    // attacker's uploads are held then) for as long as the attack holds connections (at most 150 each):
    // every one must be decided.
    await firstReport;
    expect(heldAtFirstReport).toBeGreaterThan(0);
    const reviewer = async (address: string) => {
      const answers: { uid: string; status: number; body: string }[] = [];
      for (let i = 0; i < 150 && attackOpen(); i++) {
        const uid = `${address}-${i}`;
        answers.push({ uid, ...(await post(address, review(uid))) });
      }
      return answers;
    };
    const [fromAttacker, fromOther] = await Promise.all([reviewer(ATTACKER), reviewer(OTHER)]);

    // Every attacking connection is closed by the server: a stalled upload after its deadline or when a
    // newer one needs its place (408), a dripped head by Bun's bound on a connection's first head.
    await Promise.all(attack.map((c) => c.closed));
    clearInterval(dripping);

    for (const answers of [fromAttacker, fromOther]) {
      expect(answers.length).toBeGreaterThan(0);
      for (const a of answers) {
        expect(a.status).toBe(200);
        expect(JSON.parse(a.body)).toEqual({
          apiVersion: "admission.k8s.io/v1",
          kind: "AdmissionReview",
          response: { uid: a.uid, allowed: true },
        });
      }
    }
    const answered = new Set([...fromAttacker, ...fromOther].map((a) => a.uid));
    expect(new Set(decided)).toEqual(answered);

    // Each stalled upload was dropped: when newer reviews (the attacker's, or the well-formed ones from its
    // address) needed its place, or at its deadline (the next test shows that one alone).
    for (const c of [...bigStalls, ...smallStalls]) {
      expect(c.received()).toStartWith("HTTP/1.1 408");
      expect(c.received()).toMatch(
        /review (dropped while still arriving|not received within 2s of its head)/,
      );
    }
    for (const c of drips) expect(c.received()).toBe("");

    // During the attack a crafted review still arriving may be dropped for newer uploads (408), as any
    // upload may; one that was read was refused for its user info. With the attack over, each is sent
    // again on its own and must be refused for it.
    const during = await craftedAnswers;
    for (const a of during.filter((a) => a.status === 408))
      expect(a.body).toMatch(/review (dropped while still arriving|not received within 2s of its head)/);
    const answers = [];
    for (const body of crafted) answers.push(await post(CRAFTER, body));
    for (const [i, a] of [...during.entries()].filter(([, a]) => a.status !== 408))
      expect({ i, body: a.body }).toEqual({ i, body: (answers[i] as { body: string }).body });
    for (const [i, a] of answers.entries()) {
      expect(a.status).toBe(200);
      const r = JSON.parse(a.body) as {
        response: { uid: string; allowed: boolean; status: { message: string } };
      };
      expect(r.response.uid).toStartWith("crafted-");
      expect(r.response.allowed).toBe(false);
      expect(r.response.status.message).toContain(
        "the review's user info is larger than the API server sends",
      );
      expect(r.response.status.message).toContain(
        [
          "200000 groups (at most 1000)",
          'a value of extra "example.com/blob" has 2000000 characters (at most 16384)',
          "the user name has 1000000 characters (at most 16384)",
          "more than 64 keys in extra",
        ][i] as string,
      );
    }
    expect(decided.some((uid) => uid.startsWith("crafted-"))).toBe(false);

    // Hundreds turned away, a few lines reported (at most one every 10 s; the others are counted).
    expect(reports.length).toBeLessThanOrEqual(3);
    expect(server.load()).toEqual({ uploads: 0, bytes: 0, deciding: 0, large: 0, addresses: 0 });
  }, 60_000);

  test("an upload that stops is answered 408 and its connection closed; a kept-alive connection serves on", async () => {
    const stalled = open("127.0.0.4");
    await stalled.up;
    stalled.write(`${head(1_000, false)}{"kind":"AdmissionReview"`);
    await stalled.closed;
    expect(stalled.received()).toStartWith("HTTP/1.1 408");
    expect(stalled.received()).toContain("review not received within 2s of its head; connection closed");

    // Two reviews on one kept-alive connection, as the API server sends them.
    const kept = open("127.0.0.4");
    await kept.up;
    const one = review("kept-1");
    const two = review("kept-2");
    kept.write(head(Buffer.byteLength(one), false) + one);
    await kept.until((got) => got.includes('"uid":"kept-1"'));
    kept.write(head(Buffer.byteLength(two)) + two);
    await kept.closed;
    expect(kept.received().match(/HTTP\/1\.1 200/g)).toHaveLength(2);
    expect(kept.received()).toContain('"uid":"kept-2"');
  }, 30_000);

  test("a body the server does not read is not waited for: the answer closes the connection", async () => {
    const c = open("127.0.0.4");
    await c.up;
    c.write("POST /elsewhere HTTP/1.1\r\nHost: svc-admission\r\nContent-Length: 4000000\r\n\r\n{");
    await c.closed;
    expect(c.received()).toStartWith("HTTP/1.1 404");
  });

  test("POST /authorize answers a SubjectAccessReview: denied with the reason, or no opinion; anything else is 400", async () => {
    const access = (name: string, user: unknown = "alice") =>
      JSON.stringify({
        apiVersion: "authorization.k8s.io/v1",
        kind: "SubjectAccessReview",
        spec: {
          resourceAttributes: { namespace: "bravo", verb: "get", resource: "secrets", name },
          user,
          groups: ["system:authenticated"],
        },
      });
    const denied = await post("127.0.0.5", access("foreign"), "/authorize");
    expect(denied.status).toBe(200);
    expect(JSON.parse(denied.body)).toEqual({
      apiVersion: "authorization.k8s.io/v1",
      kind: "SubjectAccessReview",
      status: { allowed: false, denied: true, reason: "another compartment" },
    });
    const open_ = await post("127.0.0.5", access("ours"), "/authorize");
    expect(JSON.parse(open_.body).status).toEqual({ allowed: false, reason: "no opinion" });
    // A user name of megabytes is denied before it is decided.
    const absurd = await post("127.0.0.5", access("ours", "x".repeat(100_000)), "/authorize");
    expect(JSON.parse(absurd.body).status).toMatchObject({ allowed: false, denied: true });
    for (const bad of [review("r"), "{}", "[]", JSON.stringify({ kind: "SubjectAccessReview", spec: null })])
      expect((await post("127.0.0.5", bad, "/authorize")).status).toBe(400);
  });

  test("the bounds are the documented ones", () => {
    expect(GATE_LIMITS).toEqual({
      uploadsPerAddress: 32,
      uploads: 1024,
      bytesPerAddress: 16 * 1024 * 1024,
      bytes: 32 * 1024 * 1024,
      decidingPerAddress: 256,
      deciding: 512,
      largeBytes: 1024 * 1024,
      large: 2,
    });
  });
});
