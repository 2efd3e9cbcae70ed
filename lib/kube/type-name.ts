/**
 * How kubectl reads a TYPE word (`kubectl get TYPE NAME`, `TYPE/NAME`): a resource, its singular, its
 * kind in any case or its short name, alone or as `TYPE.GROUP` or `TYPE.VERSION.GROUP` (two dots or more
 * split into those three: `secrets.v1.` and `secrets..` are the core group's). Returns the lower-case
 * word before the first dot when the spelling can name the core group's resource of that word, and
 * undefined when it names another group (`secrets.example.com`, `secrets.v1.example.com`). `TYPE.v1`,
 * which kubectl reads as a group named v1, is taken as the core group's: a guard would rather check too
 * much than too little.
 */
export function coreTypeWord(type: string): string | undefined {
  const [word = "", ...rest] = type.toLowerCase().split(".");
  if (rest.length === 0) return word;
  if (rest.length === 1) return rest[0] === "" || rest[0] === "v1" ? word : undefined;
  return rest.slice(1).join(".") === "" ? word : undefined;
}
