import "reflect-metadata";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import * as x509 from "@peculiar/x509";
import { derToPem } from "../../../lib/spiffe/cert.ts";

/**
 * The test bed's cluster PKI: a CA, the kube-apiserver serving certificate for 127.0.0.1/localhost, and
 * the service-account signing key pair. Users authenticate with static tokens, so no client certificates.
 */
const EC = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;
x509.cryptoProvider.set(crypto);

const pkcs8Pem = async (k: CryptoKey) =>
  derToPem(new Uint8Array(await crypto.subtle.exportKey("pkcs8", k)), "PRIVATE KEY");
const spkiPem = async (k: CryptoKey) =>
  derToPem(new Uint8Array(await crypto.subtle.exportKey("spki", k)), "PUBLIC KEY");

export interface ClusterPki {
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
  const serveKeys = await crypto.subtle.generateKey(EC, true, ["sign", "verify"]);
  const serving = await x509.X509CertificateGenerator.create({
    serialNumber: "02",
    subject: "CN=kube-apiserver",
    issuer: ca.subject,
    notBefore: new Date(now - 60_000),
    notAfter: new Date(now + 7 * 24 * 3600_000),
    signingAlgorithm: EC,
    publicKey: serveKeys.publicKey,
    signingKey: caKeys.privateKey,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(
        x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment,
        true,
      ),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension([
        { type: "ip", value: "127.0.0.1" },
        { type: "dns", value: "localhost" },
        { type: "dns", value: "kubernetes.default.svc" },
      ]),
    ],
  });
  const saKeys = await crypto.subtle.generateKey(EC, true, ["sign", "verify"]);
  const files: ClusterPki = {
    caPem: derToPem(new Uint8Array(ca.rawData)),
    caFile: join(dir, "ca.pem"),
    servingCertFile: join(dir, "apiserver.pem"),
    servingKeyFile: join(dir, "apiserver.key"),
    saPublicFile: join(dir, "sa.pub"),
    saPrivateFile: join(dir, "sa.key"),
  };
  writeFileSync(files.caFile, files.caPem);
  writeFileSync(files.servingCertFile, derToPem(new Uint8Array(serving.rawData)));
  writeFileSync(files.servingKeyFile, await pkcs8Pem(serveKeys.privateKey), { mode: 0o600 });
  writeFileSync(files.saPublicFile, await spkiPem(saKeys.publicKey));
  writeFileSync(files.saPrivateFile, await pkcs8Pem(saKeys.privateKey), { mode: 0o600 });
  return files;
}
