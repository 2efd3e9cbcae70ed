#!/usr/bin/env bun
/**
 * The svc-proxy image without a container engine: an OCI image layout (one layer) holding the release
 * binary and, from Debian's packages, only what it needs — glibc, libgcc, CA certificates, tzdata,
 * netbase, base-files — plus /etc/passwd and /etc/group with the nonroot user (65532). The shape of
 * gcr.io/distroless/cc-debian12:nonroot; package records in /var/lib/dpkg/status.d so scanners see them.
 *
 *   bun release/image.ts [--binary dist/svc-proxy] [--out dist/image] [--tag VERSION]
 *
 * Reproducible: the same binary, the same package versions and the same SOURCE_DATE_EPOCH (default: the
 * commit's time) give the same image digest. Needs apt-get (with package lists), dpkg-deb, tar, gzip,
 * and root (or fakeroot) to own files as 0 and 65532. docs/image.md.
 */
import { createHash } from "node:crypto";
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { sourceDateEpoch } from "./epoch.ts";

/** The Debian packages in the image. Nothing that runs a shell or a package manager. */
export const PACKAGES = ["base-files", "netbase", "tzdata", "ca-certificates", "libgcc-s1", "libc6"];
export const NONROOT = 65532;
const BINARY_PATH = "usr/bin/svc-proxy";
/** What a Debian package ships that a runtime never reads. The licences (copyright files) stay. */
const PRUNE = ["usr/share/man", "usr/share/info", "usr/share/lintian", "usr/share/locale", "usr/share/gcc"];

const sha256 = (data: Uint8Array | string) => createHash("sha256").update(data).digest("hex");

function sh(cmd: string[], o: { cwd?: string; env?: Record<string, string> } = {}): Buffer {
  const r = Bun.spawnSync(cmd, {
    cwd: o.cwd,
    env: { ...process.env, ...o.env },
    stdout: "pipe",
    stderr: "pipe",
  });
  if (r.exitCode !== 0) throw new Error(`${cmd.join(" ")} failed: ${r.stderr.toString().trim()}`);
  return r.stdout;
}

/** Downloads each package's current candidate and unpacks it into `root`; returns their control records. */
function unpackPackages(root: string, work: string): string[] {
  sh(["apt-get", "download", "-q", ...PACKAGES], { cwd: work });
  const debs = readdirSync(work).filter((f) => f.endsWith(".deb"));
  return PACKAGES.map((pkg) => {
    const deb = debs.find((f) => f.startsWith(`${pkg}_`));
    if (!deb) throw new Error(`apt-get download gave no .deb for ${pkg} (run apt-get update first)`);
    sh(["dpkg-deb", "-x", join(work, deb), root]);
    return sh(["dpkg-deb", "-f", join(work, deb)]).toString();
  });
}

/** update-ca-certificates' bundle, built without running it: every Mozilla certificate, in name order. */
function caBundle(root: string): void {
  const dir = join(root, "usr/share/ca-certificates/mozilla");
  const pems = readdirSync(dir)
    .filter((f) => f.endsWith(".crt"))
    .sort()
    .map((f) => readFileSync(join(dir, f), "utf8").trim());
  mkdirSync(join(root, "etc/ssl/certs"), { recursive: true });
  writeFileSync(join(root, "etc/ssl/certs/ca-certificates.crt"), `${pems.join("\n")}\n`);
  rmSync(join(root, "usr/share/ca-certificates"), { recursive: true });
  rmSync(join(root, "usr/sbin/update-ca-certificates"), { force: true });
}

function prune(root: string): void {
  for (const p of PRUNE) rmSync(join(root, p), { recursive: true, force: true });
  const doc = join(root, "usr/share/doc");
  for (const pkg of readdirSync(doc, { withFileTypes: true }))
    if (pkg.isDirectory())
      for (const f of readdirSync(join(doc, pkg.name)))
        if (f !== "copyright") rmSync(join(doc, pkg.name, f), { recursive: true });
}

function users(root: string): void {
  const etc = join(root, "etc");
  writeFileSync(
    join(etc, "passwd"),
    "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
      `nonroot:x:${NONROOT}:${NONROOT}:nonroot:/home/nonroot:/sbin/nologin\n`,
  );
  writeFileSync(join(etc, "group"), `root:x:0:\nnogroup:x:65534:\nnonroot:x:${NONROOT}:\n`);
  writeFileSync(
    join(etc, "nsswitch.conf"),
    "passwd: files\ngroup: files\nhosts: files dns\nservices: files\n",
  );
  rmSync(join(etc, "localtime"), { force: true });
  symlinkSync("/usr/share/zoneinfo/Etc/UTC", join(etc, "localtime"));
  for (const [dir, mode, owner] of [
    ["root", 0o700, 0],
    ["home/nonroot", 0o700, NONROOT],
    ["tmp", 0o1777, 0],
  ] as const) {
    mkdirSync(join(root, dir), { recursive: true });
    chmodSync(join(root, dir), mode);
    chownSync(join(root, dir), owner, owner);
  }
}

/** One file per package, as distroless writes them, so that image scanners find the versions. */
function statusRecords(root: string, controls: string[]): Record<string, string> {
  const dir = join(root, "var/lib/dpkg/status.d");
  mkdirSync(dir, { recursive: true });
  const versions: Record<string, string> = {};
  for (const c of controls) {
    const name = /^Package: (.+)$/m.exec(c)?.[1] ?? "";
    versions[name] = /^Version: (.+)$/m.exec(c)?.[1] ?? "";
    writeFileSync(join(dir, name), c.replace(/^(Package: .+)$/m, "$1\nStatus: install ok installed"));
  }
  return versions;
}

/** A tar stream whose bytes depend only on the tree: name order, fixed times, numeric owners. */
function layerTar(root: string, epoch: number): Buffer {
  return sh([
    "tar",
    "--create",
    "--file=-",
    "--directory",
    root,
    "--sort=name",
    "--format=posix",
    "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime",
    `--mtime=@${epoch}`,
    "--numeric-owner",
    ".",
  ]);
}

function gzip(data: Buffer): Buffer {
  const r = Bun.spawnSync(["gzip", "-n", "-9"], { stdin: data, stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`gzip failed: ${r.stderr.toString().trim()}`);
  return r.stdout;
}

function writeBlob(out: string, data: Buffer | string): { digest: string; size: number } {
  const bytes = typeof data === "string" ? Buffer.from(data) : data;
  const hex = sha256(bytes);
  writeFileSync(join(out, "blobs/sha256", hex), bytes);
  return { digest: `sha256:${hex}`, size: bytes.length };
}

export interface ImageResult {
  digest: string;
  packages: Record<string, string>;
}

export function buildImage(o: { binary: string; out: string; tag: string; epoch: number }): ImageResult {
  if (process.getuid?.() !== 0)
    throw new Error("run as root (or under fakeroot): image files are owned by 0 and 65532");
  if (!existsSync(o.binary)) throw new Error(`${o.binary}: no such binary (run make build first)`);
  const work = mkdtempSync(join(tmpdir(), "svc-image-"));
  try {
    const root = join(work, "rootfs");
    const debs = join(work, "debs");
    mkdirSync(root);
    mkdirSync(debs);
    const controls = unpackPackages(root, debs);
    caBundle(root);
    prune(root);
    users(root);
    const packages = statusRecords(root, controls);
    mkdirSync(join(root, "usr/bin"), { recursive: true });
    writeFileSync(join(root, BINARY_PATH), readFileSync(o.binary));
    chmodSync(join(root, BINARY_PATH), 0o755);
    const arch = sh(["dpkg", "--print-architecture"]).toString().trim();
    const created = new Date(o.epoch * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
    const tar = layerTar(root, o.epoch);
    const gz = gzip(tar);

    rmSync(o.out, { recursive: true, force: true });
    mkdirSync(join(o.out, "blobs/sha256"), { recursive: true });
    const layerBlob = writeBlob(o.out, gz);
    const labels = {
      "org.opencontainers.image.title": "svc-proxy",
      "org.opencontainers.image.version": o.tag,
      "org.opencontainers.image.created": created,
      "org.opencontainers.image.source": "https://github.com/svc-dev/svc",
      "org.opencontainers.image.licenses": "Apache-2.0",
      "org.opencontainers.image.description": `svc-proxy on Debian packages: ${Object.entries(packages)
        .map(([p, v]) => `${p} ${v}`)
        .join(", ")}`,
    };
    const config = writeBlob(
      o.out,
      JSON.stringify({
        created,
        architecture: arch,
        os: "linux",
        config: {
          User: `${NONROOT}:${NONROOT}`,
          Entrypoint: [`/${BINARY_PATH}`],
          Env: [
            "PATH=/usr/local/bin:/usr/bin:/bin",
            "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
            "HOME=/home/nonroot",
          ],
          WorkingDir: "/home/nonroot",
          Labels: labels,
        },
        rootfs: { type: "layers", diff_ids: [`sha256:${sha256(tar)}`] },
        history: [{ created, created_by: "svc release/image.ts", comment: JSON.stringify(packages) }],
      }),
    );
    const manifest = writeBlob(
      o.out,
      JSON.stringify({
        schemaVersion: 2,
        mediaType: "application/vnd.oci.image.manifest.v1+json",
        config: { mediaType: "application/vnd.oci.image.config.v1+json", ...config },
        layers: [{ mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", ...layerBlob }],
        annotations: labels,
      }),
    );
    writeFileSync(join(o.out, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
    writeFileSync(
      join(o.out, "index.json"),
      JSON.stringify({
        schemaVersion: 2,
        mediaType: "application/vnd.oci.image.index.v1+json",
        manifests: [
          {
            mediaType: "application/vnd.oci.image.manifest.v1+json",
            ...manifest,
            platform: { architecture: arch, os: "linux" },
            annotations: { "org.opencontainers.image.ref.name": o.tag },
          },
        ],
      }),
    );
    return { digest: manifest.digest, packages };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      binary: { type: "string", default: "dist/svc-proxy" },
      out: { type: "string", default: "dist/image" },
      tag: { type: "string", default: JSON.parse(readFileSync("package.json", "utf8")).version },
    },
  });
  const epoch = sourceDateEpoch();
  try {
    const r = buildImage({
      binary: resolve(values.binary as string),
      out: values.out as string,
      tag: values.tag as string,
      epoch,
    });
    console.log(`${values.out}: svc-proxy:${values.tag} ${r.digest}`);
    for (const [p, v] of Object.entries(r.packages)) console.log(`  ${p} ${v}`);
  } catch (e) {
    console.error(`image: ${(e as Error).message}`);
    process.exit(1);
  }
}
