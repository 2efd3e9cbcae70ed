#!/usr/bin/env bun
/**
 * A CycloneDX 1.5 SBOM for one release archive (GoReleaser's `sboms` step runs it per archive):
 *
 *   bun release/sbom.ts ARCHIVE DOCUMENT
 *
 * A scanner that reads the archive finds no packages in a `bun build --compile` executable, so the
 * components come from the bundler: every npm package whose files went into svc or svc-proxy (Bun's
 * metafile, read from a bundle of the same entry points), with its version and licence from its
 * package.json; the Bun runtime the executables embed (the @oven/bun-<os>-<arch> package of the
 * pinned Bun); and each file of the archive with its SHA-256. Same archive, same commit, same document.
 */
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
import { sourceDateEpoch } from "./epoch.ts";

const ROOT = resolve(import.meta.dir, "..");
const ENTRY_POINTS = ["cmd/svc.ts", "cmd/svc-proxy.ts"];

interface Component {
  type: string;
  "bom-ref": string;
  name: string;
  group?: string;
  version?: string;
  purl?: string;
  scope?: string;
  licenses?: { license: { id: string } | { name: string } }[];
  hashes?: { alg: "SHA-256"; content: string }[];
}

const readJson = (path: string) => JSON.parse(readFileSync(path, "utf8"));
const sha256 = (data: Uint8Array) => createHash("sha256").update(data).digest("hex");

/** `pkg:npm/%40scope/name@version`, as the purl specification spells npm packages. */
function npmPurl(name: string, version: string): string {
  return `pkg:npm/${name.startsWith("@") ? `%40${name.slice(1)}` : name}@${version}`;
}

function licenses(license: unknown): Component["licenses"] {
  if (typeof license !== "string" || license === "") return undefined;
  return [{ license: /^[A-Za-z0-9.+-]+$/.test(license) ? { id: license } : { name: license } }];
}

/** The package directories under node_modules whose files the bundler used. */
async function bundledPackages(): Promise<Component[]> {
  const out = mkdtempSync(join(tmpdir(), "svc-sbom-"));
  try {
    const metafile = join(out, "meta.json");
    const r = Bun.spawnSync(
      [
        process.execPath,
        "build",
        ...ENTRY_POINTS,
        "--target=bun",
        "--format=esm",
        "--splitting",
        `--outdir=${join(out, "bundle")}`,
        `--metafile=${metafile}`,
      ],
      { cwd: ROOT, stdout: "pipe", stderr: "pipe" },
    );
    if (r.exitCode !== 0) throw new Error(`bun build failed: ${r.stderr.toString().trim()}`);
    const dirs = new Set<string>();
    for (const input of Object.keys(readJson(metafile).inputs)) {
      const m = /^(.*node_modules\/(?:@[^/]+\/)?[^/]+)\//.exec(input);
      if (m?.[1]) dirs.add(m[1]);
    }
    return [...dirs].sort().map((dir) => {
      const pkg = readJson(join(ROOT, dir, "package.json"));
      return {
        type: "library",
        "bom-ref": npmPurl(pkg.name, pkg.version),
        name: pkg.name,
        version: pkg.version,
        purl: npmPurl(pkg.name, pkg.version),
        scope: "required",
        licenses: licenses(pkg.license),
      };
    });
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}

/** Each regular file of a .tar.gz archive with its SHA-256, in the archive's order. */
function archiveFiles(archive: string): Component[] {
  const dir = mkdtempSync(join(tmpdir(), "svc-sbom-files-"));
  try {
    const list = Bun.spawnSync(["tar", "-tzf", archive], { stdout: "pipe", stderr: "pipe" });
    const unpack = Bun.spawnSync(["tar", "-xzf", archive, "-C", dir], { stderr: "pipe" });
    if (list.exitCode !== 0 || unpack.exitCode !== 0)
      throw new Error(
        `${archive}: not a readable tar.gz: ${(list.stderr ?? unpack.stderr).toString().trim()}`,
      );
    return list.stdout
      .toString()
      .split("\n")
      .filter((f) => f !== "" && !f.endsWith("/"))
      .map((name) => ({
        type: "file",
        "bom-ref": `file:${name}`,
        name,
        hashes: [{ alg: "SHA-256", content: sha256(readFileSync(join(dir, name))) }],
      }));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The Bun runtime embedded in the executables, from the archive's name (…_linux_amd64.tar.gz). */
function runtime(archive: string): Component {
  const bun = readJson(join(ROOT, "package.json")).devDependencies.bun as string;
  const m = /_(linux|darwin)_(amd64|arm64)\.tar\.gz$/.exec(basename(archive));
  if (!m) throw new Error(`${archive}: expected a name ending in _<linux|darwin>_<amd64|arm64>.tar.gz`);
  const name = `@oven/bun-${m[1]}-${m[2] === "amd64" ? "x64" : "aarch64"}`;
  return {
    type: "platform",
    "bom-ref": npmPurl(name, bun),
    group: "@oven",
    name,
    version: bun,
    purl: npmPurl(name, bun),
    licenses: [{ license: { id: "MIT" } }],
  };
}

async function main([archive, document]: string[]): Promise<void> {
  if (!archive || !document) throw new Error("usage: bun release/sbom.ts ARCHIVE DOCUMENT");
  const bytes = readFileSync(archive);
  const digest = sha256(bytes);
  const version = process.env.SVC_VERSION ?? readJson(join(ROOT, "package.json")).version;
  const epoch = sourceDateEpoch();
  const bom = {
    bomFormat: "CycloneDX",
    specVersion: "1.5",
    // Derived from the archive, so that the same archive always gets the same document.
    serialNumber: `urn:uuid:${digest.slice(0, 8)}-${digest.slice(8, 12)}-5${digest.slice(13, 16)}-8${digest.slice(17, 20)}-${digest.slice(20, 32)}`,
    version: 1,
    metadata: {
      timestamp: new Date(epoch * 1000).toISOString().replace(/\.\d{3}Z$/, "Z"),
      tools: { components: [{ type: "application", name: "svc release/sbom.ts" }] },
      component: {
        type: "application",
        "bom-ref": basename(archive),
        name: basename(archive),
        version,
        hashes: [{ alg: "SHA-256", content: digest }],
        licenses: [{ license: { id: "Apache-2.0" } }],
      },
    },
    components: [runtime(archive), ...(await bundledPackages()), ...archiveFiles(archive)],
  };
  writeFileSync(document, `${JSON.stringify(bom, null, 2)}\n`);
}

await main(process.argv.slice(2)).catch((e: Error) => {
  console.error(`sbom: ${e.message}`);
  process.exit(1);
});
