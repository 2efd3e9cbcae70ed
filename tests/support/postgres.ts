import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { freePort } from "./net.ts";
import { type Proc, spawnProc } from "./proc.ts";

/**
 * A real PostgreSQL server (Debian's postgresql package) on loopback for one test file: its own data
 * directory, password authentication (scram-sha-256) for the user `svc`, started as the `postgres`
 * system user when the tests run as root (PostgreSQL refuses to run as root). stop() and start() keep
 * the data, so tests can take the database away and give it back.
 */
export interface Postgres {
  /** postgres://svc@127.0.0.1:PORT/DB, without the password. */
  url(database?: string): string;
  password: string;
  port: number;
  proc: Proc;
  /** Creates a database. */
  createDatabase(name: string): Promise<void>;
  stop(): Promise<void>;
  start(): Promise<void>;
}

function binDir(): string {
  const root = "/usr/lib/postgresql";
  const versions = existsSync(root)
    ? readdirSync(root)
        .filter((v) => existsSync(join(root, v, "bin", "postgres")))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  if (!versions[0])
    throw new Error("PostgreSQL is not installed (apt-get install postgresql; make system-deps does it)");
  return join(root, versions[0], "bin");
}

const asPostgres = (cmd: string[]) =>
  process.getuid?.() === 0
    ? ["setpriv", "--reuid=postgres", "--regid=postgres", "--clear-groups", ...cmd]
    : cmd;

export async function startPostgres(dir: string): Promise<Postgres> {
  const bin = binDir();
  const home = join(dir, "postgres");
  // A fresh server each time: a test bed directory outlives a run.
  rmSync(home, { recursive: true, force: true });
  mkdirSync(home, { recursive: true });
  chmodSync(dir, 0o755);
  const password = Buffer.from(crypto.getRandomValues(new Uint8Array(12))).toString("hex");
  writeFileSync(join(home, "pw"), password);
  if (process.getuid?.() === 0) {
    const uid = Number(Bun.spawnSync(["id", "-u", "postgres"]).stdout.toString().trim());
    const gid = Number(Bun.spawnSync(["id", "-g", "postgres"]).stdout.toString().trim());
    chownSync(home, uid, gid);
    chownSync(join(home, "pw"), uid, gid);
  }
  const data = join(home, "data");
  const init = Bun.spawnSync(
    asPostgres([
      join(bin, "initdb"),
      "-D",
      data,
      "-U",
      "svc",
      `--pwfile=${join(home, "pw")}`,
      "--auth=scram-sha-256",
      "-E",
      "UTF8",
      "--locale=C.UTF-8",
    ]),
    { stdout: "pipe", stderr: "pipe" },
  );
  if (init.exitCode !== 0) throw new Error(`initdb failed: ${init.stderr.toString()}`);
  const port = await freePort();
  const pg: Postgres = {
    url: (database = "postgres") => `postgres://svc@127.0.0.1:${port}/${database}`,
    password,
    port,
    proc: undefined as unknown as Proc,
    async createDatabase(name) {
      const { SQL } = await import("bun");
      const sql = new SQL({ url: pg.url(), password, max: 1 });
      await sql.unsafe(`CREATE DATABASE "${name}"`);
      await sql.close();
    },
    async start() {
      pg.proc = spawnProc(
        asPostgres([
          join(bin, "postgres"),
          "-D",
          data,
          "-p",
          String(port),
          "-c",
          "listen_addresses=127.0.0.1",
          "-c",
          `unix_socket_directories=${home}`,
          "-c",
          "max_connections=200",
          "-c",
          "logging_collector=off",
        ]),
      );
      // postgres logs to standard error; the line is the server's own word that it serves.
      const deadline = Date.now() + 30_000;
      while (!pg.proc.stderr().includes("database system is ready to accept connections")) {
        if (pg.proc.proc.exitCode !== null) throw new Error(`postgres exited:\n${pg.proc.stderr()}`);
        if (Date.now() > deadline)
          throw new Error(`postgres did not start within 30 s:\n${pg.proc.stderr()}`);
        await Bun.sleep(20);
      }
    },
    async stop() {
      // SIGINT: PostgreSQL's fast shutdown (connections are closed, the data is kept).
      await pg.proc.stop("SIGINT");
    },
  };
  await pg.start();
  return pg;
}
