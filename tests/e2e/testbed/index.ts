import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type KubeState, startKube } from "./kube.ts";
import { type MosquittoState, startMosquitto } from "./mosquitto.ts";
import { peers } from "./peers.ts";
import { alive, run, startedDaemons, stopPid } from "./process.ts";
import { type SpireState, startSpire } from "./spire.ts";

/**
 * The e2e test bed: etcd, kube-apiserver, kwok, SPIRE server and agent, mosquitto, all on loopback and
 * free ports, under one directory (default <repo>/.testbed). `up` writes state.json; `down` stops every
 * process by PID and removes the directory unless logs are to be kept.
 */
export interface Testbed {
  dir: string;
  logs: string;
  kube: KubeState;
  spire: SpireState;
  mosquitto: MosquittoState;
  versions: Record<string, string>;
  startedInMs: number;
}

const REPO = new URL("../../..", import.meta.url).pathname.replace(/\/$/, "");
export const TESTBED_DIR = process.env.SVC_TESTBED_DIR || join(REPO, ".testbed");
const stateFile = (dir: string) => join(dir, "state.json");

export function readTestbed(dir = TESTBED_DIR): Testbed | undefined {
  if (!existsSync(stateFile(dir))) return undefined;
  const tb = JSON.parse(readFileSync(stateFile(dir), "utf8")) as Testbed;
  return allPids(tb).every(([, pid]) => alive(pid)) ? tb : undefined;
}

function allPids(tb: Testbed): [string, number][] {
  return [...Object.entries(tb.kube.pids), ...Object.entries(tb.spire.pids), ["mosquitto", tb.mosquitto.pid]];
}

export function kubectlAs(tb: Testbed, user: keyof KubeState["users"]) {
  return (args: string[], input?: string) =>
    run(
      ["kubectl", `--kubeconfig=${tb.kube.kubeconfig}`, `--context=${tb.kube.users[user].context}`, ...args],
      {},
      input,
    );
}

export async function up(dir = TESTBED_DIR, log: (m: string) => void = () => {}): Promise<Testbed> {
  const t0 = Date.now();
  const p = peers();
  rmSync(dir, { recursive: true, force: true });
  const logs = join(dir, "logs");
  mkdirSync(logs, { recursive: true });
  chmodSync(dir, 0o755);
  // What a failed start leaves running is stopped: every daemon started from here on, finished or not.
  const before = startedDaemons.length;
  try {
    log("starting etcd, kube-apiserver and kwok");
    const kube = await startKube(p, dir, logs);
    log(`kube-apiserver ready at ${kube.apiserver} (${Date.now() - t0} ms)`);
    const admin = (args: string[], input?: string) =>
      run(["kubectl", `--kubeconfig=${kube.kubeconfig}`, "--context=testbed-admin", ...args], {}, input);
    log("starting SPIRE server and agent");
    const spire = await startSpire(p, dir, logs, admin);
    log(`SPIRE agent ready at unix://${spire.agentSocket} (${Date.now() - t0} ms)`);
    const mosquitto = await startMosquitto(dir, logs);
    const tb: Testbed = {
      dir,
      logs,
      kube,
      spire,
      mosquitto,
      versions: p.versions,
      startedInMs: Date.now() - t0,
    };
    writeFileSync(stateFile(dir), JSON.stringify(tb, null, 2));
    log(`test bed up in ${tb.startedInMs} ms; state in ${stateFile(dir)}`);
    return tb;
  } catch (e) {
    for (const pid of startedDaemons.slice(before).reverse()) await stopPid(pid);
    throw new Error(`${(e as Error).message}\nlogs kept in ${logs}`);
  }
}

/** Stops everything; keeps the directory (with its logs) when `keepLogs`. */
export async function down(tb: Testbed | undefined = readStateEvenIfDead(), keepLogs = false): Promise<void> {
  if (!tb) return;
  for (const [, pid] of allPids(tb).reverse()) await stopPid(pid);
  if (!keepLogs) rmSync(tb.dir, { recursive: true, force: true });
}

function readStateEvenIfDead(dir = TESTBED_DIR): Testbed | undefined {
  return existsSync(stateFile(dir))
    ? (JSON.parse(readFileSync(stateFile(dir), "utf8")) as Testbed)
    : undefined;
}
