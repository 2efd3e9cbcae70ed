import { describe, expect, test } from "bun:test";
import { parseDuration } from "../../lib/duration.ts";
import { parseEndpoint, resolveEndpoint } from "../../lib/spiffe/address.ts";
import { parseGoFlags } from "../../proxy/flags.ts";

describe("Workload API addresses", () => {
  test.each([
    ["unix:///run/spire/agent.sock", "unix:///run/spire/agent.sock"],
    ["unix:/run/spire/agent.sock", "unix:///run/spire/agent.sock"],
    ["/run/spire/agent.sock", "unix:///run/spire/agent.sock"],
    ["tcp://127.0.0.1:8000", "127.0.0.1:8000"],
  ])("%s", (input, target) => expect(parseEndpoint(input)).toBe(target));

  test.each([
    ["unix://host/run/agent.sock", /must not have a host part/],
    ["unix:relative.sock", /must be absolute/],
    ["unix:///run/agent.sock?x=1", /query or fragment/],
    ["tcp://localhost:8000", /must be an IP/],
    ["tcp://127.0.0.1:8000/foo", /must be an IP and a port with nothing after it/],
    ["http://127.0.0.1:8000", /unknown scheme/],
  ])("%s is refused", (input, why) => {
    expect(() => parseEndpoint(input)).toThrow(why);
    expect(() => parseEndpoint(input)).toThrow(/allowed: unix:\/\/\/absolute\/path or tcp:\/\/<ip>:<port>/);
  });

  test("SPIFFE_ENDPOINT_SOCKET is the fallback, and its absence is a clear error", () => {
    expect(resolveEndpoint(undefined, { SPIFFE_ENDPOINT_SOCKET: "unix:///a.sock" })).toBe("unix:///a.sock");
    expect(resolveEndpoint("unix:///b.sock", { SPIFFE_ENDPOINT_SOCKET: "unix:///a.sock" })).toBe(
      "unix:///b.sock",
    );
    expect(() => resolveEndpoint(undefined, {})).toThrow(/set SPIFFE_ENDPOINT_SOCKET=unix:\/\/\//);
  });
});

describe("Go durations", () => {
  test.each([
    ["500ms", 500],
    ["30s", 30_000],
    ["2m", 120_000],
    ["1h30m", 5_400_000],
    ["1.5s", 1500],
    ["0", 0],
    ["0s", 0],
    ["250us", 0.25],
    ["-1s", -1000],
  ])("%s = %d ms", (text, ms) => expect(parseDuration(text)).toBe(ms));

  test.each(["", "5", "1d", "s", "1h 30m", "1.2.3s"])("%j is refused with the allowed form", (text) => {
    expect(() => parseDuration(text)).toThrow(/use a Go duration such as 500ms/);
  });
});

describe("svc-proxy flags (Go conventions)", () => {
  const specs = [
    { name: "config", kind: "string" as const, usage: "" },
    { name: "zap-devel", kind: "bool" as const, usage: "" },
    { name: "zap-encoder", kind: "string" as const, usage: "", default: "json", values: ["json", "console"] },
  ];
  test("single and double dashes, = or a separate value, booleans", () => {
    expect(parseGoFlags(specs, ["-config", "a.yaml", "--zap-devel"])).toEqual({
      config: "a.yaml",
      "zap-devel": true,
      "zap-encoder": "json",
    });
    expect(parseGoFlags(specs, ["--config=b.yaml", "-zap-devel=false", "-zap-encoder=console"])).toEqual({
      config: "b.yaml",
      "zap-devel": false,
      "zap-encoder": "console",
    });
  });
  test("errors name the flag and what is allowed", () => {
    expect(() => parseGoFlags(specs, ["-nope"])).toThrow("flag provided but not defined: -nope");
    expect(() => parseGoFlags(specs, ["-config"])).toThrow("flag needs an argument: -config");
    expect(() => parseGoFlags(specs, ["-zap-encoder=xml"])).toThrow(
      'invalid value "xml" for -zap-encoder (allowed: json, console)',
    );
    expect(() => parseGoFlags(specs, ["-zap-devel=yes"])).toThrow(/allowed: true, false/);
    expect(() => parseGoFlags(specs, ["stray"])).toThrow(/takes only flags/);
  });
});
