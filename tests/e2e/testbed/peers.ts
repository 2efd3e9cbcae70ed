import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

/** Where build-peers.sh put each peer, from the pinned versions file. */
const HERE = new URL(".", import.meta.url).pathname;
export const E2E_DIR = join(HERE, "..");

export function versions(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of readFileSync(join(E2E_DIR, "versions.env"), "utf8").split("\n")) {
    const m = /^([A-Z0-9_]+)="?([^"]*)"?$/.exec(line.trim());
    if (m) out[m[1] as string] = m[2] as string;
  }
  return out;
}

const CACHE = join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "svc-testbed");

export interface Peers {
  spireServer: string;
  spireAgent: string;
  kubeApiserver: string;
  kubeControllerManager: string;
  kubeScheduler: string;
  /** The SPIRE controller manager's ClusterSPIFFEID CRD (a manifest, not a binary). */
  clusterSpiffeIdCrd: string;
  etcd: string;
  kwok: string;
  ghostunnel: string;
  /** The HTTP/2 conformance suite (not part of the test bed; tests/e2e/http2-conformance.e2e.test.ts). */
  h2spec: string;
  /** Go's HPACK behind a JSON-lines protocol (tests/integration/hpack-differential.test.ts). */
  hpackPeer: string;
  /** transparency-dev's checkpoint verifier behind a JSON-lines protocol (tests/integration/notary-checkpoint.test.ts). */
  notePeer: string;
  versions: Record<string, string>;
}

/** The build-peers.sh name that builds each peer. */
const BUILT_BY: Record<keyof Omit<Peers, "versions">, string> = {
  spireServer: "spire",
  spireAgent: "spire",
  kubeApiserver: "kube-apiserver",
  kubeControllerManager: "kube-apiserver",
  kubeScheduler: "kube-apiserver",
  clusterSpiffeIdCrd: "spire-crds",
  etcd: "etcd",
  kwok: "kwok",
  ghostunnel: "ghostunnel",
  h2spec: "h2spec",
  hpackPeer: "hpack",
  notePeer: "note",
};

/** One peer's path, for a benchmark that needs only it; the error names the build step for it alone. */
export function peer(name: keyof typeof BUILT_BY): string {
  const path = paths()[name];
  if (!existsSync(path))
    throw new Error(
      `${name} not built: run tests/e2e/build-peers.sh ${BUILT_BY[name]} (it is built into ${path})`,
    );
  return path;
}

function paths(): Omit<Peers, "versions"> {
  const v = versions();
  const bin = (name: string, version: string, binary: string) =>
    join(CACHE, `${name}-${version}`, "bin", binary);
  return {
    spireServer: bin("spire", v.SPIRE_VERSION as string, "spire-server"),
    spireAgent: bin("spire", v.SPIRE_VERSION as string, "spire-agent"),
    kubeApiserver: bin("kube-apiserver", v.KUBERNETES_VERSION as string, "kube-apiserver"),
    kubeControllerManager: bin("kube-apiserver", v.KUBERNETES_VERSION as string, "kube-controller-manager"),
    kubeScheduler: bin("kube-apiserver", v.KUBERNETES_VERSION as string, "kube-scheduler"),
    clusterSpiffeIdCrd: bin(
      "spire-controller-manager",
      v.SPIRE_CONTROLLER_MANAGER_VERSION as string,
      "spire.spiffe.io_clusterspiffeids.yaml",
    ),
    etcd: bin("etcd", v.ETCD_VERSION as string, "etcd"),
    kwok: bin("kwok", v.KWOK_VERSION as string, "kwok"),
    ghostunnel: bin("ghostunnel", v.GHOSTUNNEL_VERSION as string, "ghostunnel"),
    h2spec: bin("h2spec", v.H2SPEC_VERSION as string, "h2spec"),
    hpackPeer: bin("hpack-peer", v.HPACK_NET_VERSION as string, "hpack-peer"),
    notePeer: bin("note-peer", v.NOTE_FORMATS_VERSION as string, "note-peer"),
  };
}

/** Every peer of the test bed; the error names all that are missing. */
export function peers(): Peers {
  const p = paths();
  const missing = Object.entries(p).filter(([, path]) => !existsSync(path));
  if (missing.length > 0) {
    throw new Error(
      `test bed peers not built: ${missing.map(([k]) => k).join(", ")}; run tests/e2e/build-peers.sh (or make peers)`,
    );
  }
  return { ...p, versions: versions() };
}
