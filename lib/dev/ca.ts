/**
 * A local certificate authority for development and tests: one self-signed root per trust domain,
 * issuing X.509-SVIDs and JWT-SVIDs. Development only: its keys sit unencrypted in a directory.
 */
import "reflect-metadata";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import * as x509 from "@peculiar/x509";
import { exportJWK, importPKCS8, type JSONWebKeySet, type JWK, SignJWT } from "jose";
import { derToPem, pemToDer } from "../spiffe/cert.ts";
import { parseSpiffeId, parseTrustDomain } from "../spiffe/id.ts";

const EC = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;
x509.cryptoProvider.set(crypto);

/** A certificate to issue; the defaults give a valid X.509-SVID leaf. Tests vary the fields to break rules. */
export interface IssueSpec {
  uris: string[];
  ttlMs: number;
  isCA?: boolean;
  keyUsage?: number;
  notBefore?: Date;
  /** Sign with this key/issuer instead of the CA (for intermediates). */
  signer?: { key: CryptoKey; subject: string };
  subject?: string;
  /** More extensions, as DER values (tests of unusual certificates). */
  extra?: { oid: string; critical: boolean; value: Uint8Array }[];
}

export interface Issued {
  certDer: Uint8Array;
  keyDer: Uint8Array;
  key: CryptoKey;
  subject: string;
  notAfter: Date;
}

const pkcs8 = async (k: CryptoKey) => new Uint8Array(await crypto.subtle.exportKey("pkcs8", k));
const randomSerial = () =>
  Buffer.from(crypto.getRandomValues(new Uint8Array(16)))
    .toString("hex")
    .replace(/^[89a-f]/, "1");

export class DevCa {
  private constructor(
    readonly trustDomain: string,
    readonly caDer: Uint8Array,
    private readonly caKey: CryptoKey,
    private readonly caSubject: string,
    private readonly jwtKey: CryptoKey,
    readonly jwtKeyId: string,
    private readonly jwtPublic: JWK,
  ) {}

  /**
   * Loads the CA of `trustDomain` from `dir` (created with mode 0700 if absent), or creates it there;
   * without a directory the CA lives in memory only.
   */
  static async open(trustDomain: string, dir?: string): Promise<DevCa> {
    const td = parseTrustDomain(trustDomain);
    if (!dir) return DevCa.build(td, ...(await DevCa.generate(td)));
    const existing = await DevCa.load(td, dir);
    if (existing) return existing;
    // Created in a private directory and renamed into place, so that servers started together with the
    // same --ca-dir agree on one CA: the rename of the loser fails and it loads the winner's.
    const [caDer, caKeyDer, jwtPem] = await DevCa.generate(td);
    mkdirSync(dirname(resolve(dir)), { recursive: true });
    const tmp = mkdtempSync(`${resolve(dir)}.tmp-`);
    writeFileSync(join(tmp, "ca.pem"), derToPem(caDer));
    writeFileSync(join(tmp, "ca.key"), derToPem(caKeyDer, "PRIVATE KEY"), { mode: 0o600 });
    writeFileSync(join(tmp, "jwt.key"), jwtPem, { mode: 0o600 });
    chmodSync(tmp, 0o700);
    try {
      renameSync(tmp, dir);
    } catch {
      rmSync(tmp, { recursive: true, force: true });
      const winner = await DevCa.load(td, dir);
      if (!winner) throw new Error(`development CA directory ${dir} exists but holds no ca.pem`);
      return winner;
    }
    return DevCa.build(td, caDer, caKeyDer, jwtPem);
  }

  private static async load(td: string, dir: string): Promise<DevCa | undefined> {
    let caPem: string;
    try {
      caPem = readFileSync(join(dir, "ca.pem"), "utf8");
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw e;
    }
    return DevCa.build(
      td,
      pemToDer(caPem)[0] as Uint8Array,
      pemToDer(readFileSync(join(dir, "ca.key"), "utf8"), "PRIVATE KEY")[0] as Uint8Array,
      readFileSync(join(dir, "jwt.key"), "utf8"),
    );
  }

  /** A new root (DER), its PKCS#8 key (DER) and a JWT signing key (PEM). */
  private static async generate(td: string): Promise<[Uint8Array, Uint8Array, string]> {
    const keys = await crypto.subtle.generateKey(EC, true, ["sign", "verify"]);
    const now = Date.now();
    const ca = await x509.X509CertificateGenerator.createSelfSigned({
      serialNumber: randomSerial(),
      name: `O=SPIFFE, CN=svc development CA ${td}`,
      notBefore: new Date(now - 60_000),
      notAfter: new Date(now + 365 * 24 * 3600_000),
      signingAlgorithm: EC,
      keys,
      extensions: [
        new x509.BasicConstraintsExtension(true, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
        new x509.SubjectAlternativeNameExtension([{ type: "url", value: `spiffe://${td}` }]),
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      ],
    });
    const jwt = await crypto.subtle.generateKey(EC, true, ["sign", "verify"]);
    return [
      new Uint8Array(ca.rawData),
      await pkcs8(keys.privateKey),
      derToPem(await pkcs8(jwt.privateKey), "PRIVATE KEY"),
    ];
  }

  private static async build(
    td: string,
    caDer: Uint8Array,
    caKeyDer: Uint8Array,
    jwtPem: string,
  ): Promise<DevCa> {
    const caKey = await crypto.subtle.importKey("pkcs8", Buffer.from(caKeyDer), EC, true, ["sign"]);
    const subject = new x509.X509Certificate(caDer).subject;
    const jwtKey = (await importPKCS8(jwtPem, "ES256", { extractable: true })) as CryptoKey;
    const jwk = await exportJWK(jwtKey);
    delete jwk.d;
    const kid = Buffer.from(
      await crypto.subtle.digest("SHA-256", new TextEncoder().encode(`${jwk.x}${jwk.y}`)),
    )
      .toString("base64url")
      .slice(0, 22);
    return new DevCa(td, caDer, caKey, subject, jwtKey, kid, { ...jwk, kid, use: "jwt-svid", alg: "ES256" });
  }

  async issue(spec: IssueSpec): Promise<Issued> {
    const keys = await crypto.subtle.generateKey(EC, true, ["sign", "verify"]);
    const notBefore = spec.notBefore ?? new Date(Date.now() - 10_000);
    const notAfter = new Date(notBefore.getTime() + 10_000 + spec.ttlMs);
    const isCA = spec.isCA ?? false;
    const subject = spec.subject ?? "O=SPIFFE";
    const extensions: x509.Extension[] = [
      new x509.BasicConstraintsExtension(isCA, undefined, true),
      new x509.KeyUsagesExtension(
        spec.keyUsage ??
          (isCA
            ? x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign
            : x509.KeyUsageFlags.digitalSignature),
        true,
      ),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ];
    if (!isCA)
      extensions.push(
        new x509.ExtendedKeyUsageExtension([
          x509.ExtendedKeyUsage.serverAuth,
          x509.ExtendedKeyUsage.clientAuth,
        ]),
      );
    if (spec.uris.length > 0)
      extensions.push(
        new x509.SubjectAlternativeNameExtension(spec.uris.map((value) => ({ type: "url", value }))),
      );
    for (const e of spec.extra ?? []) extensions.push(new x509.Extension(e.oid, e.critical, e.value));
    const cert = await x509.X509CertificateGenerator.create({
      serialNumber: randomSerial(),
      subject,
      issuer: spec.signer?.subject ?? this.caSubject,
      notBefore,
      notAfter,
      signingAlgorithm: EC,
      publicKey: keys.publicKey,
      signingKey: spec.signer?.key ?? this.caKey,
      extensions,
    });
    return {
      certDer: new Uint8Array(cert.rawData),
      keyDer: await pkcs8(keys.privateKey),
      key: keys.privateKey,
      subject,
      notAfter,
    };
  }

  /** A valid X.509-SVID for `spiffeId`: the chain (leaf only) and its PKCS#8 key, both DER. */
  async issueX509Svid(spiffeId: string, ttlMs: number): Promise<Issued> {
    const id = parseSpiffeId(spiffeId);
    if (id.trustDomain !== this.trustDomain) {
      throw new Error(`${id.uri} is not in trust domain ${this.trustDomain} of this CA`);
    }
    return this.issue({ uris: [id.uri], ttlMs });
  }

  async signJwtSvid(spiffeId: string, audience: string[], ttlMs: number): Promise<string> {
    const now = Math.floor(Date.now() / 1000);
    return new SignJWT({})
      .setProtectedHeader({ alg: "ES256", kid: this.jwtKeyId, typ: "JWT" })
      .setSubject(parseSpiffeId(spiffeId).uri)
      .setAudience(audience)
      .setIssuedAt(now)
      .setExpirationTime(now + Math.ceil(ttlMs / 1000))
      .sign(this.jwtKey);
  }

  jwks(): JSONWebKeySet {
    return { keys: [this.jwtPublic] };
  }
}
