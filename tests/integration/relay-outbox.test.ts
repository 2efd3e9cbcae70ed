import { afterAll, expect, test } from "bun:test";
import net from "node:net";
import type { Socket, TCPSocketListener } from "bun";
import { Outbox } from "../../proxy/http/relay/outbox.ts";
import { waitUntil } from "../support/wait.ts";

/**
 * The relay's outbox (proxy/http/relay/outbox.ts) over real sockets: what a connection's socket does not
 * take at once is queued and written on drain, and it is exactly what that connection was sent, whatever
 * other connections write meanwhile. (Messages of several pieces are gathered in one buffer that every
 * outbox shares; what stays queued must be a copy of its own, not a view of that buffer.)
 */
const servers: TCPSocketListener<Outbox | undefined>[] = [];
const peers: net.Socket[] = [];
afterAll(() => {
  for (const p of peers) p.destroy();
  for (const s of servers) s.stop(true);
});

/**
 * Two connections to a server whose every connection writes through an Outbox: a slow one, which reads
 * nothing until resumed (the kernel's buffers fill and its outbox queues), and another that reads what it
 * is sent. Their outboxes on the server's side (a: the slow one's, b: the other's).
 */
async function twoConnections() {
  const accepted: Socket<Outbox | undefined>[] = [];
  const server = Bun.listen<Outbox | undefined>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(s) {
        s.data = new Outbox(s as Socket<unknown>);
        accepted.push(s);
      },
      drain(s) {
        s.data?.drain();
      },
      data() {},
    },
  });
  servers.push(server);
  const connect = (): { socket: net.Socket; received: Buffer[] } => {
    const socket = net.connect(server.port, "127.0.0.1");
    const received: Buffer[] = [];
    socket.on("data", (d: Buffer) => received.push(d));
    socket.on("error", () => {});
    peers.push(socket);
    return { socket, received };
  };
  const slow = connect();
  slow.socket.pause(); // reads nothing: the kernel's buffers fill and the outbox queues
  connect(); // another connection, which reads what it is sent
  await waitUntil("both connections accepted", () => accepted.length === 2, 10_000);
  // The server's end of each, told apart by the client's port.
  const ends = accepted.map((s) => [s.remotePort === slow.socket.localPort, s.data as Outbox] as const);
  const a = ends.find(([isSlow]) => isSlow)?.[1] as Outbox;
  const b = ends.find(([isSlow]) => !isSlow)?.[1] as Outbox;
  return { slow, a, b };
}

/** Resumes the slow reader: everything it was sent, once it has all arrived. */
async function readAll(slow: { socket: net.Socket; received: Buffer[] }, bytes: number): Promise<string> {
  slow.socket.resume();
  await waitUntil(
    "everything sent to the slow reader",
    () => slow.received.reduce((n, d) => n + d.length, 0) >= bytes,
    30_000,
  );
  return Buffer.concat(slow.received).toString("latin1");
}

test("queued messages reach their own connection intact while another connection writes", async () => {
  const { slow, a, b } = await twoConnections();

  // Messages of two pieces (gathered before the write), numbered, to the slow reader until some stay queued.
  let sent = "";
  const message = (i: number) => [`<${i}:`, `${"a".repeat(1000)}>`] as const;
  for (let i = 0; i < 20_000 && a.queued === 0; i++) {
    for (const piece of message(i)) a.addText(piece);
    a.flush();
    sent += message(i).join("");
  }
  expect(a.queued).toBeGreaterThan(0);
  for (let i = 20_000; i < 20_010; i++) {
    for (const piece of message(i)) a.addText(piece);
    a.flush();
    sent += message(i).join("");
  }
  // Another connection's messages, of two pieces too, written at once.
  for (let i = 0; i < 10; i++) {
    b.addText("SECRET-OF-B-");
    b.addText(String(i).repeat(900));
    b.flush();
  }

  const got = await readAll(slow, Buffer.byteLength(sent, "latin1"));
  expect(got.includes("SECRET-OF-B")).toBe(false);
  expect(got === sent).toBe(true);
});

test("octets written in place (reserve), reused by every flush, stay intact where they wait", async () => {
  const { slow, a } = await twoConnections();
  // Each message is one range of the outbox's own octets, numbered: the write the socket does not take
  // whole must keep a copy, since the next message is written over the same octets.
  let sent = "";
  const write = (i: number) => {
    const text = `<${i}:${"o".repeat(900)}>`;
    const at = a.reserve(text.length);
    Buffer.from(a.ownBytes.buffer, a.ownBytes.byteOffset).write(text, at, "latin1");
    a.flush();
    sent += text;
  };
  let i = 0;
  for (; i < 20_000 && a.queued === 0; i++) write(i);
  expect(a.queued).toBeGreaterThan(0);
  for (const end = i + 10; i < end; i++) write(i);
  expect(await readAll(slow, sent.length)).toBe(sent);
});
