import { describe, expect, test } from "bun:test";
import { BUN } from "../support/proc.ts";
import { spawnAsWorkload, useTestbed, workload } from "./support.ts";
import { TRUST_DOMAIN, WORKLOAD_SVID_TTL_SECONDS } from "./testbed/spire.ts";

const testbed = useTestbed();

describe("our Workload API client against a real SPIRE agent", () => {
  test("a workload gets its pod-form X.509-SVID and bundle, a JWT-SVID, and sees a rotation", async () => {
    const tb = testbed();
    const web = workload(tb, "web");
    const probe = spawnAsWorkload(tb, web, [
      BUN,
      "tests/support/workload-probe.ts",
      String(WORKLOAD_SVID_TTL_SECONDS * 1500),
    ]);
    const first = JSON.parse(await probe.waitFor((l) => l.includes('"svid"'), 60_000));
    expect(first.svid).toBe(web.spiffeId);
    expect(first.svid).toMatch(
      new RegExp(`^spiffe://${TRUST_DOMAIN}/ns/alpha/sa/web/pod/web-0/[0-9a-f-]{36}$`),
    );
    expect(first.bundles).toEqual([TRUST_DOMAIN]);
    // The agent honours the entry's short TTL.
    expect(new Date(first.notAfter).getTime() - Date.now()).toBeLessThanOrEqual(
      WORKLOAD_SVID_TTL_SECONDS * 1000,
    );

    const jwt = JSON.parse(await probe.waitFor((l) => l.includes('"jwt"'), 30_000));
    expect(jwt).toEqual({ jwt: web.spiffeId, local: web.spiffeId, remote: web.spiffeId, aud: ["svc-e2e"] });

    const rotation = JSON.parse(
      await probe.waitFor((l) => l.includes('"rotated"'), WORKLOAD_SVID_TTL_SECONDS * 2000),
    );
    expect(rotation.rotated).toBe(true);
    expect(rotation.serial).not.toBe(first.serial);
    expect(new Date(rotation.notAfter).getTime()).toBeGreaterThan(new Date(first.notAfter).getTime());
    await probe.stop();
  }, 120_000);

  test("a process with no registration entry gets no SVID", async () => {
    const tb = testbed();
    const stranger = {
      ...(tb.spire.workloads.web as NonNullable<typeof tb.spire.workloads.web>),
      name: "stranger",
      uid: 20099,
    };
    const probe = spawnAsWorkload(tb, stranger, [
      BUN,
      "-e",
      `
      const { X509Source } = await import("./lib/spiffe/x509-source.ts");
      try { await X509Source.open({ timeoutMs: 4000 }); console.log("got an SVID"); }
      catch (e) { console.log(JSON.stringify({ refused: e.message })); }
      process.exit(0);`,
    ]);
    const line = JSON.parse(
      await probe.waitFor((l) => l.includes("refused") || l.includes("got an SVID"), 30_000),
    );
    expect(line.refused).toMatch(
      /no X.509-SVID from the Workload API .* within 4000 ms: .*PERMISSION_DENIED/,
    );
  }, 60_000);
});
