/**
 * What a client presented in its CONNECT to prove who it is (docs/proxy-mqtt.md, "Whose credentials"):
 * each message goes to the target under those of the client that published it, never another's. The
 * messages a session's clients publish under the same credentials share one object, which delivery
 * compares by identity.
 */
import type { MqttVersion } from "../codec.ts";

export interface Credentials {
  username?: string;
  password?: Buffer;
}

export function presented(connect: { username?: string; password?: Buffer | string }): Credentials {
  return {
    ...(connect.username !== undefined ? { username: connect.username } : {}),
    ...(connect.password !== undefined ? { password: Buffer.from(connect.password) } : {}),
  };
}

export function sameCredentials(a: Credentials, b: Credentials): boolean {
  if (a.username !== b.username) return false;
  if (a.password === undefined || b.password === undefined) return a.password === b.password;
  return a.password.equals(b.password);
}

/** A CONNACK refusal about the credentials: MQTT 5 0x86, 0x87 and 0x8C; MQTT 3.1.1 return codes 4 and 5. */
export function refusesCredentials(code: number, version: MqttVersion): boolean {
  return version === 5 ? [0x86, 0x87, 0x8c].includes(code) : code === 4 || code === 5;
}
