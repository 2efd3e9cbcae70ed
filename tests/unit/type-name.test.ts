import { describe, expect, test } from "bun:test";
import { coreTypeWord } from "../../lib/kube/type-name.ts";

/** TYPE words as kubectl reads them (lib/kube/type-name.ts): which can name the core group's resource. */
describe("a TYPE word's core-group resource", () => {
  test("every spelling kubectl reads as the core group gives the word, in lower case", () => {
    for (const [type, word] of [
      ["secrets", "secrets"],
      ["Secret", "secret"],
      ["SECRETS", "secrets"],
      ["cm", "cm"],
      ["secrets.", "secrets"],
      ["secrets.v1", "secrets"],
      ["secrets.v1.", "secrets"],
      ["secrets..", "secrets"],
      ["Secret.V1.", "secret"],
      ["configmaps.v2.", "configmaps"],
    ] as const)
      expect({ type, word: coreTypeWord(type) }).toEqual({ type, word });
  });

  test("a spelling that names another group gives nothing", () => {
    for (const type of [
      "secrets.example.com",
      "secrets.v1.example.com",
      "secrets.apps",
      "cm.x..",
      "secrets.v1..",
    ])
      expect({ type, word: coreTypeWord(type) }).toEqual({ type, word: undefined });
  });
});
