/**
 * Notarization over unbuffered MQTT 5 (docs/proxy-mqtt.md, "Notarization"). A client asks for a level with
 * the user property `svc.notarization` on CONNECT (for the whole connection) or on a PUBLISH (for that
 * message). The proxy answers with user properties:
 * - CONNACK: `svc.workload-id`, the workload statement of the upstream;
 * - PUBACK of a QoS 1 PUBLISH: `svc.workload-id`; `svc.request-id` for logRequest and signRequest;
 *   `svc.receipt-id` for signRequest (the receipt records PUBLISH, the topic, the payload digest and the
 *   PUBACK reason code);
 * - `svc.notary-error` when the level cannot be honoured here (no notary, no authenticated upstream) and
 *   no proxy further on answered.
 * The hop that honours a request consumes it (`svc.notarization` is not forwarded) and replaces any answer
 * properties from upstream with its own: one answer, from the hop that authenticated the upstream.
 * An unknown level is refused (CONNACK or PUBACK reason 0x83 with the allowed values). A statement that
 * cannot be issued (the upstream's pod does not match) fails the CONNACK (0x80, connection closed) or the
 * PUBACK (0x80); the broker may still have the message, as with any failed acknowledgement.
 */
import type {
  IConnackPacket,
  IConnectPacket,
  IPubackPacket,
  IPublishPacket,
  UserProperties,
} from "mqtt-packet";
import { bodyDigest } from "../../lib/notary-objects/ids.ts";
import { isLevel, LEVELS, type Level } from "../../lib/notary-objects/levels.ts";
import { receiptHeaders } from "../../lib/notary-objects/receipt.ts";
import type { Upstream } from "../http/types.ts";
import type { Logger } from "../log.ts";
import type { Notary } from "../notary-service/notary.ts";
import { encode, PacketDecoder, Reason, userProperty } from "./codec.ts";

export const PROPERTY = {
  level: "svc.notarization",
  workloadId: "svc.workload-id",
  requestId: "svc.request-id",
  receiptId: "svc.receipt-id",
  error: "svc.notary-error",
} as const;

interface Pending {
  level: Level;
  requestId: string;
  topic: string;
  payload: Buffer;
  properties: UserProperties;
}

export interface NotarizerContext {
  notary: Notary | undefined;
  upstream: Upstream | undefined;
  /** The target as the statement's audience names it, e.g. mqtts://broker:8883. */
  origin: string;
  log: Logger;
}

/**
 * What to do with a packet from the client: forward it (as received, or as `raw` when this hop rewrote it),
 * or answer it here instead.
 */
export type Decision = { forward: true; raw?: Buffer } | { forward: false; reply?: Buffer; close?: boolean };

// The answers a notarizing hop gives. An upstream's (another proxy's, or a broker's) are removed from the
// packets of a request this hop answers, so that the client gets one answer from one hop.
const ANSWERS = [PROPERTY.workloadId, PROPERTY.requestId, PROPERTY.receiptId, PROPERTY.error];

function withoutAnswers(user: UserProperties | undefined): UserProperties {
  const out: UserProperties = { ...user };
  for (const name of ANSWERS) delete out[name];
  return out;
}

/** The packet's user properties without the level request, which this hop consumes. */
function withoutLevel<T extends { properties?: { userProperties?: UserProperties } }>(p: T): T {
  const user: UserProperties = { ...p.properties?.userProperties };
  delete user[PROPERTY.level];
  return { ...p, properties: { ...p.properties, userProperties: user } };
}

const FORWARD: Decision = { forward: true };

export class MqttNotarizer {
  private connectionLevel: Level | undefined;
  /** Why levels cannot be honoured on this connection, if they cannot. */
  private readonly unavailable: string | undefined;
  private connackNote: string | undefined;
  private connackWanted = false;
  private readonly pending = new Map<number, Pending>();
  private readonly fromServer = new PacketDecoder(5);
  private readonly fromClient = new PacketDecoder(5);

  constructor(private readonly c: NotarizerContext) {
    this.unavailable = !c.notary
      ? "the notary is not enabled on this proxy"
      : !c.upstream
        ? "notarization needs an authenticated upstream workload: a client or central listener with an mqtts:// target"
        : undefined;
  }

  /** True while PUBLISH packets must be read (a level can only be honoured with the notary). */
  readsPublish(): boolean {
    return this.unavailable === undefined;
  }
  readsConnack(): boolean {
    return this.connackWanted;
  }
  readsPuback(): boolean {
    return this.pending.size > 0;
  }

  connect(p: IConnectPacket): Decision {
    const asked = userProperty(p.properties, PROPERTY.level);
    if (asked === undefined) return FORWARD;
    if (!isLevel(asked))
      return {
        forward: false,
        close: true,
        reply: encode(
          {
            cmd: "connack",
            sessionPresent: false,
            reasonCode: Reason.implementationSpecific,
            properties: { reasonString: unknownLevel(asked) },
          },
          5,
        ),
      };
    this.connackWanted = true;
    // A hop that cannot honour the request passes it on: a proxy further on may (see connack).
    if (this.unavailable) {
      this.connackNote = this.unavailable;
      return FORWARD;
    }
    // This hop answers it, so no hop further on sees it.
    this.connectionLevel = asked;
    return { forward: true, raw: encode(withoutLevel(p), 5) };
  }

  publish(raw: Buffer): Decision {
    const p = this.fromClient.decode(raw) as IPublishPacket;
    const asked = userProperty(p.properties, PROPERTY.level);
    if (asked !== undefined && !isLevel(asked)) {
      this.c.log.warn("PUBLISH refused", { reason: unknownLevel(asked), topic: p.topic });
      if (p.qos !== 1) return { forward: false };
      return {
        forward: false,
        reply: puback(p.messageId ?? 0, Reason.implementationSpecific, unknownLevel(asked)),
      };
    }
    const level = asked ?? this.connectionLevel;
    const forward: Decision =
      asked === undefined ? FORWARD : { forward: true, raw: encode(withoutLevel(p), 5) };
    if (!level || p.qos !== 1) return forward;
    this.pending.set(p.messageId ?? 0, {
      level,
      requestId: crypto.randomUUID(),
      topic: p.topic,
      payload: Buffer.isBuffer(p.payload) ? p.payload : Buffer.from(p.payload),
      properties: p.properties?.userProperties ?? {},
    });
    return forward;
  }

  /** The broker's CONNACK with the statement's ID added; rejects (closing) when none can be issued. */
  async connack(raw: Buffer): Promise<{ raw: Buffer; close: boolean }> {
    const p = this.fromServer.decode(raw) as IConnackPacket;
    this.connackWanted = false;
    const props = p.properties ?? {};
    p.properties = props;
    if (this.connackNote) {
      // Not honoured here: unless a hop further on answered, say why.
      const user: UserProperties = props.userProperties ?? {};
      props.userProperties = user;
      if (user[PROPERTY.workloadId] === undefined && user[PROPERTY.error] === undefined)
        user[PROPERTY.error] = this.connackNote;
      return { raw: encode(p, 5), close: false };
    }
    const user = withoutAnswers(props.userProperties);
    props.userProperties = user;
    if ((p.reasonCode ?? 0) < 0x80 && this.c.notary && this.c.upstream) {
      try {
        user[PROPERTY.workloadId] = (await this.c.notary.statementFor(this.c.upstream, this.c.origin)).id;
      } catch (e) {
        this.c.log.warn("notarization failed", { packet: "CONNACK", reason: (e as Error).message });
        p.reasonCode = Reason.unspecified;
        props.reasonString = `svc-proxy: no workload statement: ${(e as Error).message}`;
        return { raw: encode(p, 5), close: true };
      }
    }
    return { raw: encode(p, 5), close: false };
  }

  /** The broker's PUBACK, with the notary's identifiers when its PUBLISH asked for a level. */
  async puback(raw: Buffer): Promise<Buffer> {
    const p = this.fromServer.decode(raw) as IPubackPacket;
    const pending = this.pending.get(p.messageId ?? 0);
    if (!pending) return raw;
    this.pending.delete(p.messageId ?? 0);
    const { notary, upstream, origin } = this.c;
    if (!notary || !upstream) return raw;
    const status = p.reasonCode ?? 0;
    const user: UserProperties = {};
    try {
      const statement = await notary.statementFor(upstream, origin);
      user[PROPERTY.workloadId] = statement.id;
      const receipt = await notary.record(
        pending.level,
        statement.id,
        origin,
        pending.requestId,
        {
          request: {
            method: "PUBLISH",
            path: pending.topic,
            headers: receiptHeaders(pending.properties),
            body: bodyDigest(pending.payload),
          },
          response: { status, headers: {}, body: bodyDigest(new Uint8Array(0)) },
        },
        { request: pending.payload, response: new Uint8Array(0) },
      );
      if (pending.level !== "workload") user[PROPERTY.requestId] = pending.requestId;
      if (receipt) user[PROPERTY.receiptId] = receipt.id;
    } catch (e) {
      this.c.log.warn("notarization failed", {
        packet: "PUBACK",
        topic: pending.topic,
        reason: (e as Error).message,
      });
      return puback(
        p.messageId ?? 0,
        Reason.unspecified,
        `svc-proxy: not notarized: ${(e as Error).message}`,
      );
    }
    return encode(
      {
        ...p,
        reasonCode: status,
        properties: {
          ...p.properties,
          userProperties: { ...withoutAnswers(p.properties?.userProperties), ...user },
        },
      },
      5,
    );
  }
}

function unknownLevel(asked: string): string {
  return `unknown ${PROPERTY.level} level ${JSON.stringify(asked)} (allowed: ${LEVELS.join(", ")})`;
}

function puback(messageId: number, reasonCode: number, reasonString: string): Buffer {
  return encode({ cmd: "puback", messageId, reasonCode, properties: { reasonString } }, 5);
}
