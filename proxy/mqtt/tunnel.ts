/**
 * One unbuffered MQTT connection: the caller's packets go to the target and back as they came, byte for
 * byte, framed so that the proxy can tell where each packet starts. CONNECT is read (it must come first,
 * once) and, on MQTT 5 connections, whatever notarization needs (see notarize.ts). A malformed packet
 * from either side closes this connection, with the reason logged. Backpressure holds as for TCP.
 */
import type { Socket } from "node:net";
import type { IConnectPacket } from "mqtt-packet";
import type { Logger } from "../log.ts";
import type { Dialled } from "../stream/dial.ts";
import type { Carried } from "../stream/serve-caller.ts";
import { encode, type MqttVersion, PacketDecoder, Reason } from "./codec.ts";
import { MalformedPacket, MqttFramer, PacketType } from "./framer.ts";
import { MqttNotarizer, type NotarizerContext } from "./notarize.ts";
import { OrderedWriter } from "./writer.ts";

const MAX_WHOLE_PACKET = 16 * 1024 * 1024;

export function tunnel(
  caller: Socket,
  target: Dialled,
  ctx: Omit<NotarizerContext, "upstream">,
): Promise<Carried> {
  const { socket: server, upstream } = target;
  const log: Logger = ctx.log;
  return new Promise((resolve) => {
    const result: Carried = { toTarget: 0, toCaller: 0 };
    let done = false;
    const finish = (reason?: string) => {
      if (done) return;
      done = true;
      if (reason) result.reason = reason;
      caller.destroy();
      server.destroy();
      resolve(result);
    };
    const toServer = new OrderedWriter(server, caller, (e) => finish(e.message));
    const toCaller = new OrderedWriter(caller, server, (e) => finish(e.message));
    let version: MqttVersion | undefined;
    let closing = false;
    let notarizer: MqttNotarizer | undefined;
    const connectDecoder = new PacketDecoder();

    const onConnect = (raw: Buffer) => {
      if (version !== undefined) throw new MalformedPacket("a second CONNECT on one connection");
      const p = connectDecoder.decode(raw) as IConnectPacket;
      version = p.protocolVersion ?? 4;
      log.debug("CONNECT", { client_id: p.clientId, version });
      if (version === 5) {
        notarizer = new MqttNotarizer({ ...ctx, upstream });
        const d = notarizer.connect(p);
        if (!d.forward) {
          if (d.reply) toCaller.write(d.reply);
          if (d.close) caller.end(() => finish("notarization level refused"));
          return;
        }
        toServer.write(d.raw ?? raw);
        return;
      }
      toServer.write(raw);
    };
    const up = new MqttFramer({
      maxWholeBytes: MAX_WHOLE_PACKET,
      whole: (t) => t === PacketType.CONNECT || (t === PacketType.PUBLISH && !!notarizer?.readsPublish()),
      packet: (raw) => {
        const type = (raw[0] as number) >> 4;
        if (type === PacketType.CONNECT) return onConnect(raw);
        const d = (notarizer as MqttNotarizer).publish(raw);
        if (d.forward) toServer.write(d.raw ?? raw);
        else if (d.reply) toCaller.write(d.reply);
      },
      bytes: (b) => {
        if (version === undefined) throw new MalformedPacket("the first packet must be CONNECT");
        toServer.write(b);
      },
    });
    const down = new MqttFramer({
      maxWholeBytes: MAX_WHOLE_PACKET,
      whole: (t) =>
        (t === PacketType.CONNACK && !!notarizer?.readsConnack()) ||
        (t === PacketType.PUBACK && !!notarizer?.readsPuback()),
      packet: (raw) => {
        const n = notarizer as MqttNotarizer;
        if ((raw[0] as number) >> 4 === PacketType.CONNACK) {
          toCaller.write(
            n.connack(raw).then(({ raw: reply, close }) => {
              if (close) setImmediate(() => caller.end(() => finish("notarization failed")));
              return reply;
            }),
          );
        } else toCaller.write(n.puback(raw));
      },
      bytes: (b) => toCaller.write(b),
    });

    const feed = (framer: MqttFramer, from: string) => (chunk: Buffer) => {
      if (from === "caller") result.toTarget += chunk.length;
      else result.toCaller += chunk.length;
      if (closing) return;
      try {
        framer.push(chunk);
      } catch (e) {
        const reason = `malformed MQTT packet from the ${from}: ${(e as Error).message}`;
        log.warn("connection closed", { reason });
        if (version !== 5) return finish(reason);
        // An MQTT 5 caller is told why: DISCONNECT 0x81 (its packet was malformed) or 0x80 (the
        // target's was), then the connection closes.
        closing = true;
        const code = from === "caller" ? Reason.malformed : Reason.unspecified;
        const disconnect = encode(
          { cmd: "disconnect", reasonCode: code, properties: { reasonString: reason } },
          5,
        );
        caller.end(disconnect, () => finish(reason));
      }
    };
    caller.on("data", feed(up, "caller"));
    server.on("data", feed(down, "target"));
    caller.on("end", () => server.end());
    server.on("end", () => caller.end());
    caller.on("error", (e) => finish(e.message));
    server.on("error", (e) => finish(e.message));
    caller.once("close", () => finish());
    server.once("close", () => finish());
    caller.resume();
  });
}
