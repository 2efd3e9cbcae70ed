import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../support/dev-api.ts";
import { ROOT } from "../support/proc.ts";

/**
 * What `goreleaser release --snapshot` left in dist/release (`make release-snapshot` runs it first): an
 * archive per platform with both binaries, completions, manual pages and the licence; an SBOM and a
 * checksum for each; a cask that installs the completions and manual pages; binaries that run.
 */
const DIST = join(ROOT, "dist/release");
const PLATFORMS = ["linux_amd64", "linux_arm64", "darwin_amd64", "darwin_arm64"];
const MEMBERS = [
  "svc",
  "svc-proxy",
  "LICENSE",
  "README.md",
  "completions/svc.bash",
  "completions/_svc",
  "completions/svc.fish",
  "completions/svc-proxy.bash",
  "completions/_svc-proxy",
  "completions/svc-proxy.fish",
  "man/svc.1",
  "man/svc-proxy.1",
];

const sha256 = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");
const sh = (cmd: string[]) => {
  const r = Bun.spawnSync(cmd, { stdout: "pipe", stderr: "pipe" });
  return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
};

let archives: Record<string, string>;
let unpacked: string;

beforeAll(() => {
  if (!existsSync(join(DIST, "metadata.json")))
    throw new Error(`${DIST}: no snapshot release; run make release-snapshot`);
  const names = readdirSync(DIST).filter((f) => f.endsWith(".tar.gz"));
  archives = Object.fromEntries(
    PLATFORMS.map((p) => [p, names.find((n) => n.endsWith(`_${p}.tar.gz`)) ?? `(none for ${p})`]),
  );
  unpacked = tempDir("svc-release-");
  const r = sh(["tar", "-xzf", join(DIST, archives.linux_amd64 as string), "-C", unpacked]);
  if (r.code !== 0) throw new Error(`cannot unpack the linux_amd64 archive: ${r.err}`);
});

afterAll(() => rmSync(unpacked, { recursive: true, force: true }));

describe("the snapshot release", () => {
  test.each(PLATFORMS)("the %s archive holds both binaries, completions, manual pages and LICENSE", (p) => {
    const list = sh(["tar", "-tzf", join(DIST, archives[p] as string)]);
    expect(list.code).toBe(0);
    const members = list.out.split("\n");
    for (const m of MEMBERS) expect(members).toContain(m);
  });

  test.each(
    PLATFORMS,
  )("the %s archive has a CycloneDX SBOM naming the bundled packages and its files", (p) => {
    const archive = archives[p] as string;
    const bom = JSON.parse(readFileSync(join(DIST, `${archive}.cdx.json`), "utf8"));
    expect(bom.bomFormat).toBe("CycloneDX");
    expect(bom.metadata.component.hashes[0].content).toBe(sha256(join(DIST, archive)));
    const purls = bom.components.map((c: { purl?: string }) => c.purl).filter(Boolean);
    const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"));
    for (const [name, version] of Object.entries(pkg.dependencies as Record<string, string>))
      expect(purls).toContain(`pkg:npm/${name.replace(/^@/, "%40")}@${version}`);
    const os = p.split("_")[0];
    const cpu = p.endsWith("amd64") ? "x64" : "aarch64";
    expect(purls).toContain(`pkg:npm/%40oven/bun-${os}-${cpu}@${pkg.devDependencies.bun}`);
    const files = bom.components
      .filter((c: { type: string }) => c.type === "file")
      .map((c: { name: string }) => c.name);
    for (const m of MEMBERS) expect(files).toContain(m);
  });

  test("checksums.txt covers every archive and SBOM, with their digests", () => {
    const sums = new Map(
      readFileSync(join(DIST, "checksums.txt"), "utf8")
        .trim()
        .split("\n")
        .map((l) => l.split(/\s+/).reverse() as [string, string]),
    );
    for (const archive of Object.values(archives))
      for (const f of [archive, `${archive}.cdx.json`]) expect(sums.get(f)).toBe(sha256(join(DIST, f)));
  });

  test("the SBOM's file digests are those of the files in the archive", () => {
    const bom = JSON.parse(readFileSync(join(DIST, `${archives.linux_amd64}.cdx.json`), "utf8"));
    for (const c of bom.components.filter((c: { type: string }) => c.type === "file"))
      expect(c.hashes[0].content).toBe(sha256(join(unpacked, c.name)));
  });

  test("the cask installs both binaries, the manual pages and the completions", () => {
    const cask = readFileSync(join(DIST, "homebrew/Casks/svc.rb"), "utf8");
    for (const line of [
      'binary "svc"',
      'binary "svc-proxy"',
      'manpage "man/svc.1"',
      'manpage "man/svc-proxy.1"',
      'bash_completion "completions/svc.bash"',
      'zsh_completion "completions/_svc"',
      'fish_completion "completions/svc.fish"',
    ])
      expect(cask).toContain(line);
  });

  test("the linux_amd64 binaries run and report the snapshot version", () => {
    const version = JSON.parse(readFileSync(join(DIST, "metadata.json"), "utf8")).version as string;
    expect(sh([join(unpacked, "svc"), "version"]).out).toStartWith(`svc version ${version} `);
    expect(sh([join(unpacked, "svc-proxy"), "-version"]).out).toStartWith(`svc-proxy version ${version} `);
  });

  test("the manual pages render, and the svc-proxy bash completion offers its flags and values", () => {
    const man = sh(["man", "-l", "-P", "cat", join(unpacked, "man/svc-proxy.1")]);
    expect(man.code).toBe(0);
    expect(man.out).toContain("-zap-log-level");
    const complete = (line: string) =>
      sh([
        "bash",
        "-c",
        `source ${join(unpacked, "completions/svc-proxy.bash")}; COMP_WORDS=(${line}); COMP_CWORD=$((\${#COMP_WORDS[@]}-1)); _svc_proxy; printf '%s\\n' "\${COMPREPLY[@]}"`,
      ]).out;
    expect(complete("svc-proxy -zap-l").trim()).toBe("-zap-log-level");
    expect(complete("svc-proxy -zap-encoder ''").split("\n").filter(Boolean)).toEqual(["json", "console"]);
  });
});
