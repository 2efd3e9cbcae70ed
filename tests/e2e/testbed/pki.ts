import "reflect-metadata";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import * as x509 from "@peculiar/x509";
import { derToPem } from "../../../lib/spiffe/cert.ts";

/**
 * The test bed's cluster PKI: a CA, the kube-apiserver serving certificate for 127.0.0.1/localhost, and
 * the service-account signing key pair, and client and serving certificates issued on demand: users
 * authenticate with client certificates whose organisations are their groups (static tokens work too).
 */
const EC = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;
x509.cryptoProvider.set(crypto);

const pkcs8Pem = async (k: CryptoKey) =>
  derToPem(new Uint8Array(await crypto.subtle.exportKey("pkcs8", k)), "PRIVATE KEY");
const spkiPem = async (k: CryptoKey) =>
  derToPem(new Uint8Array(await crypto.subtle.exportKey("spki", k)), "PUBLIC KEY");

export interface Pem {
  cert: string;
  key: string;
}

export interface ClusterPki {
  /** A client certificate CN=user, O=group for each group. */
  clientCert(user: string, groups: string[]): Promise<Pem>;
  /** A serving certificate for 127.0.0.1 and localhost. */
  servingCert(name: string): Promise<Pem>;
  caPem: string;
  caFile: string;
  servingCertFile: string;
  servingKeyFile: string;
  saPublicFile: string;
  saPrivateFile: string;
}

export async function writeClusterPki(dir: string): Promise<ClusterPki> {
  const now = Date.now();
  const caKeys = await crypto.subtle.generateKey(EC, true, ["sign", "verify"]);
  const ca = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: "01",
    name: "CN=svc test bed CA",
    notBefore: new Date(now - 60_000),
    notAfter: new Date(now + 7 * 24 * 3600_000),
    signingAlgorithm: EC,
    keys: caKeys,
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
    ],
  });
  const issue = async (subject: string, usage: x509.ExtendedKeyUsage, sans: boolean): Promise<Pem> => {
    const keys = await crypto.subtle.generateKey(EC, true, ["sign", "verify"]);
    const cert = await x509.X509CertificateGenerator.create({
      serialNumber: Buffer.from(crypto.getRandomValues(new Uint8Array(8)))
        .toString("hex")
        .replace(/^./, "1"),
      subject,
      issuer: ca.subject,
      notBefore: new Date(now - 60_000),
      notAfter: new Date(now + 7 * 24 * 3600_000),
      signingAlgorithm: EC,
      publicKey: keys.publicKey,
      signingKey: caKeys.privateKey,
      extensions: [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(
          x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment,
          true,
        ),
        new x509.ExtendedKeyUsageExtension([usage]),
        ...(sans
          ? [
              new x509.SubjectAlternativeNameExtension([
                { type: "ip", value: "127.0.0.1" },
                { type: "dns", value: "localhost" },
                { type: "dns", value: "kubernetes.default.svc" },
              ]),
            ]
          : []),
      ],
    });
    return { cert: derToPem(new Uint8Array(cert.rawData)), key: await pkcs8Pem(keys.privateKey) };
  };
  // Distinguished-name values: a comma or plus in a group would need escaping; svc's groups have none.
  const clientCert = (user: string, groups: string[]) =>
    issue([`CN=${user}`, ...groups.map((g) => `O=${g}`)].join(", "), x509.ExtendedKeyUsage.clientAuth, false);
  const servingCert = (name: string) => issue(`CN=${name}`, x509.ExtendedKeyUsage.serverAuth, true);
  const serving = await servingCert("kube-apiserver");
  const saKeys = await crypto.subtle.generateKey(EC, true, ["sign", "verify"]);
  const files: ClusterPki = {
    clientCert,
    servingCert,
    caPem: derToPem(new Uint8Array(ca.rawData)),
    caFile: join(dir, "ca.pem"),
    servingCertFile: join(dir, "apiserver.pem"),
    servingKeyFile: join(dir, "apiserver.key"),
    saPublicFile: join(dir, "sa.pub"),
    saPrivateFile: join(dir, "sa.key"),
  };
  writeFileSync(files.caFile, files.caPem);
  writeFileSync(files.servingCertFile, serving.cert);
  writeFileSync(files.servingKeyFile, serving.key, { mode: 0o600 });
  writeFileSync(files.saPublicFile, await spkiPem(saKeys.publicKey));
  writeFileSync(files.saPrivateFile, await pkcs8Pem(saKeys.privateKey), { mode: 0o600 });
  return files;
}
