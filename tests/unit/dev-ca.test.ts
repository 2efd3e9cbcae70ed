import { describe, expect, test } from "bun:test";
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { DevCa } from "../../lib/dev/ca.ts";
import { tempDir } from "../support/dev-api.ts";

describe("development CA directory", () => {
  test("servers opening one new directory at the same time agree on one CA", async () => {
    const dir = join(tempDir(), "ca");
    const cas = await Promise.all(Array.from({ length: 6 }, () => DevCa.open("example.org", dir)));
    const roots = new Set(cas.map((c) => Buffer.from(c.caDer).toString("base64")));
    expect(roots.size).toBe(1);
    expect(new Set(cas.map((c) => c.jwtKeyId)).size).toBe(1);
    // A later start loads the same CA; no temporary directories are left behind.
    expect((await DevCa.open("example.org", dir)).caDer).toEqual(cas[0]?.caDer as Uint8Array);
    expect(readdirSync(join(dir, ".."))).toEqual(["ca"]);
    expect(readdirSync(dir).sort()).toEqual(["ca.key", "ca.pem", "jwt.key"]);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(join(dir, "ca.key")).mode & 0o777).toBe(0o600);
  });

  test("without a directory every CA is new", async () => {
    const [a, b] = await Promise.all([DevCa.open("example.org"), DevCa.open("example.org")]);
    expect(a?.caDer).not.toEqual(b?.caDer as Uint8Array);
  });
});
