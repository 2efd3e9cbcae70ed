import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify } from "yaml";
import { onlyProd, startProdApis, tempDir } from "../support/dev-api.ts";
import { freePort } from "../support/net.ts";
import { type Proc, ROOT, spawnProc, stopAll } from "../support/proc.ts";
import { waitForLog } from "../support/proxy.ts";

/**
 * The svc-proxy image of `make image` (dist/image, an OCI layout), as a runtime sees it: read by skopeo,
 * unpacked by umoci, and run with bubblewrap as uid 65532 on a read-only root that holds only the image
 * (plus /proc, /dev and the mounts a pod would have: the configuration and the Workload API socket
 * directory). A client→server pair from two such sandboxes carries a request between host processes.
 */
const LAYOUT = join(ROOT, "dist/image");
const TAG = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).version as string;
const NONROOT = "65532";

const run = (cmd: string[]) => {
  const r = Bun.spawnSync(cmd, { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
  return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
};

let dir: string;
let rootfs: string;

/** svc-proxy inside the image's root file system: uid and gid 65532, nothing of the host but the mounts. */
function sandboxed(args: string[], mounts: Record<string, string> = {}): string[] {
  const binds = Object.entries(mounts).flatMap(([inside, host]) => ["--ro-bind", host, inside]);
  return [
    ...["setpriv", `--reuid=${NONROOT}`, `--regid=${NONROOT}`, "--clear-groups"],
    ...["bwrap", "--ro-bind", rootfs, "/", "--proc", "/proc", "--dev", "/dev", ...binds],
    ...["--unshare-all", "--share-net", "--die-with-parent", "--clearenv", "--chdir", "/home/nonroot"],
    "/usr/bin/svc-proxy",
    ...args,
  ];
}

/** A directory the nonroot user can read, holding `config.yaml`. */
function configDir(name: string, config: object): string {
  const d = join(dir, name);
  mkdirSync(d);
  writeFileSync(join(d, "config.yaml"), stringify(config));
  chmodSync(d, 0o755);
  chmodSync(join(d, "config.yaml"), 0o644);
  return d;
}

beforeAll(() => {
  if (!existsSync(join(LAYOUT, "index.json"))) throw new Error(`${LAYOUT}: no image; run make image first`);
  dir = tempDir("svc-image-");
  chmodSync(dir, 0o755);
  const bundle = join(dir, "bundle");
  const r = run(["umoci", "unpack", "--image", `${LAYOUT}:${TAG}`, bundle]);
  if (r.code !== 0) throw new Error(`umoci unpack failed: ${r.err}`);
  chmodSync(bundle, 0o755);
  rootfs = join(bundle, "rootfs");
  // Mount points, as a container runtime creates them in its writable layer.
  for (const m of ["etc/svc-proxy", "spiffe-workload-api"]) mkdirSync(join(rootfs, m), { recursive: true });
}, 120_000);

afterAll(async () => {
  await stopAll();
  rmSync(dir, { recursive: true, force: true });
});

describe("the image", () => {
  test("its configuration runs svc-proxy as 65532 and names the tag", () => {
    const r = run(["skopeo", "inspect", "--config", `oci:${LAYOUT}:${TAG}`]);
    expect(r.code).toBe(0);
    const config = JSON.parse(r.out);
    expect(config.config.User).toBe(`${NONROOT}:${NONROOT}`);
    expect(config.config.Entrypoint).toEqual(["/usr/bin/svc-proxy"]);
    expect(config.config.Labels["org.opencontainers.image.version"]).toBe(TAG);
    expect(config.rootfs.diff_ids).toHaveLength(1);
  });

  test("building it again from the same binary and packages gives the same digest", () => {
    const again = join(dir, "again");
    const r = run([
      process.execPath,
      "release/image.ts",
      "--binary",
      "dist/svc-proxy",
      "--out",
      again,
      "--tag",
      TAG,
    ]);
    expect(r.err).toBe("");
    const digest = (layout: string) =>
      JSON.parse(readFileSync(join(layout, "index.json"), "utf8")).manifests[0].digest;
    expect(digest(again)).toBe(digest(LAYOUT));
  }, 120_000);

  test("its root file system holds the binary and no shell or package manager", () => {
    for (const d of ["bin", "sbin", "usr/sbin"]) expect(readdirSync(join(rootfs, d))).toEqual([]);
    expect(readdirSync(join(rootfs, "usr/bin"))).toEqual(["svc-proxy"]);
    expect(readFileSync(join(rootfs, "etc/passwd"), "utf8")).toContain(
      `nonroot:x:${NONROOT}:${NONROOT}:nonroot:/home/nonroot:/sbin/nologin`,
    );
    const bundle = readFileSync(join(rootfs, "etc/ssl/certs/ca-certificates.crt"), "utf8");
    expect(bundle.match(/BEGIN CERTIFICATE/g)?.length ?? 0).toBeGreaterThan(100);
    expect(existsSync(join(rootfs, "usr/share/zoneinfo/Europe/London"))).toBe(true);
    expect(readdirSync(join(rootfs, "var/lib/dpkg/status.d")).sort()).toEqual(
      ["base-files", "ca-certificates", "libc6", "libgcc-s1", "netbase", "tzdata"].sort(),
    );
  });

  test("svc-proxy -version and -check run inside it, as 65532, on a read-only root", () => {
    const version = run(sandboxed(["-version"]));
    expect(version.err).toBe("");
    expect(version.out).toStartWith(`svc-proxy version ${TAG} `);
    const cfg = configDir("check", {
      spiffe: { workload_socket_path: "unix:///spiffe-workload-api/spire-agent.sock" },
      listeners: [
        { name: "in", address: "127.0.0.1:8443", mode: "server", target: { url: "http://127.0.0.1:8080" } },
      ],
    });
    const check = run(
      sandboxed(["-check", "-config", "/etc/svc-proxy/config.yaml"], { "/etc/svc-proxy": cfg }),
    );
    expect(check.code).toBe(0);
    expect(check.out).toContain("/etc/svc-proxy/config.yaml: valid (1 listener)");
    const bad = run(sandboxed(["-config", "/etc/svc-proxy/missing.yaml"], { "/etc/svc-proxy": cfg }));
    expect(bad.code).toBe(1);
    expect(bad.err).toContain("cannot read the configuration file");
  });

  test("a client→server pair, each in its own sandbox, carries a request with the caller's SPIFFE ID", async () => {
    const sockets = join(dir, "sockets");
    mkdirSync(sockets);
    chmodSync(sockets, 0o755);
    const apis = await startProdApis(sockets, ["web", "api"]);
    // The sockets are the development API's (owned by root); a SPIRE agent's socket is open to all.
    for (const api of Object.values(apis)) chmodSync(api.socket.replace("unix://", ""), 0o666);
    const upstream = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch: (req) => new Response(`upstream saw ${req.headers.get("svc-peer-id")}\n`),
    });
    const [serverPort, clientPort] = await Promise.all([freePort(), freePort()]);
    const start = (name: string, sa: string, listener: object): Proc =>
      spawnProc(
        sandboxed(["-config", "/etc/svc-proxy/config.yaml"], {
          "/etc/svc-proxy": configDir(name, {
            spiffe: { workload_socket_path: `unix:///spiffe-workload-api/${sa}.sock` },
            metricsAddr: "0",
            listeners: [listener],
          }),
          "/spiffe-workload-api": sockets,
        }),
      );
    try {
      const server = start("server", "api", {
        name: "in",
        address: `127.0.0.1:${serverPort}`,
        mode: "server",
        target: { url: `http://127.0.0.1:${upstream.port}` },
        source: { spiffe_ids: onlyProd("web") },
      });
      const client = start("client", "web", {
        name: "out",
        address: `127.0.0.1:${clientPort}`,
        mode: "client",
        target: { url: `https://127.0.0.1:${serverPort}`, spiffe_ids: onlyProd("api") },
      });
      await Promise.all([waitForLog(server, "listening", 30_000), waitForLog(client, "listening", 30_000)]);
      const res = await fetch(`http://127.0.0.1:${clientPort}/hello`);
      expect(res.status).toBe(200);
      expect(await res.text()).toBe("upstream saw spiffe://example.org/ns/prod/sa/web\n");
    } finally {
      upstream.stop(true);
    }
  }, 60_000);
});
