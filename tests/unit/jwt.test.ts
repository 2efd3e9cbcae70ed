import { beforeAll, describe, expect, test } from "bun:test";
import { SignJWT } from "jose";
import { DevCa } from "../../lib/dev/ca.ts";
import { JwtBundleSet, validateJwtSvid } from "../../lib/spiffe/jwt.ts";

let ca: DevCa;
let bundles: JwtBundleSet;
const ID = "spiffe://example.org/ns/default/sa/web";

beforeAll(async () => {
  ca = await DevCa.open("example.org");
  bundles = new JwtBundleSet([["spiffe://example.org", ca.jwks()]]);
});

describe("JWT-SVID validation", () => {
  test("a JWT-SVID for the audience validates and yields its SPIFFE ID", async () => {
    const token = await ca.signJwtSvid(ID, ["svc"], 60_000);
    const v = await validateJwtSvid(token, "svc", bundles);
    expect(v.id.uri).toBe(ID);
    expect(v.claims.aud).toEqual(["svc"]);
  });

  test("the wrong audience is refused", async () => {
    const token = await ca.signJwtSvid(ID, ["svc"], 60_000);
    await expect(validateJwtSvid(token, "other", bundles)).rejects.toThrow(
      /invalid JWT-SVID: unexpected "aud"/,
    );
  });

  test("a token signed by another trust domain's key is refused", async () => {
    const impostor = await DevCa.open("example.org");
    const token = await impostor.signJwtSvid(ID, ["svc"], 60_000);
    await expect(validateJwtSvid(token, "svc", bundles)).rejects.toThrow(/invalid JWT-SVID/);
  });

  test("a subject without a bundle is refused", async () => {
    const other = await DevCa.open("other.org");
    const token = await other.signJwtSvid("spiffe://other.org/w", ["svc"], 60_000);
    await expect(validateJwtSvid(token, "svc", bundles)).rejects.toThrow(
      'no JWT bundle for trust domain "other.org"',
    );
  });

  test("alg none, HS256 and a missing exp are refused", async () => {
    const body = Buffer.from(JSON.stringify({ sub: ID, aud: "svc", exp: 9999999999 })).toString("base64url");
    const none = `${Buffer.from('{"alg":"none"}').toString("base64url")}.${body}.`;
    await expect(validateJwtSvid(none, "svc", bundles)).rejects.toThrow(/algorithm "none" is not allowed/);
    const hs = await new SignJWT({ sub: ID, aud: "svc" })
      .setProtectedHeader({ alg: "HS256" })
      .setExpirationTime("1h")
      .sign(new Uint8Array(32));
    await expect(validateJwtSvid(hs, "svc", bundles)).rejects.toThrow(/algorithm "HS256" is not allowed/);
    const key = (await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, [
      "sign",
    ])) as CryptoKeyPair;
    const noExp = await new SignJWT({ sub: ID, aud: "svc" })
      .setProtectedHeader({ alg: "ES256" })
      .sign(key.privateKey);
    await expect(validateJwtSvid(noExp, "svc", bundles)).rejects.toThrow(/exp claim is missing/);
  });

  test("a subject that is not a SPIFFE ID is refused", async () => {
    const key = (await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, [
      "sign",
    ])) as CryptoKeyPair;
    const t = await new SignJWT({ sub: "web", aud: "svc" })
      .setProtectedHeader({ alg: "ES256" })
      .setExpirationTime("1h")
      .sign(key.privateKey);
    await expect(validateJwtSvid(t, "svc", bundles)).rejects.toThrow(/sub is not a SPIFFE ID/);
  });

  test("bundle keys marked for X.509 are not used for JWTs", () => {
    const set = new JwtBundleSet([
      [
        "example.org",
        {
          keys: [
            { kty: "EC", use: "x509-svid" },
            { kty: "EC", use: "jwt-svid", kid: "k" },
          ],
        },
      ],
    ]);
    expect(set.get("example.org")?.keys).toEqual([{ kty: "EC", kid: "k" }]);
  });
});
