/** What svc is, in one line: the help and the manual page print it. */
export const SVC_DESCRIPTION = "Compartment-aware kubectl for multi-level-security clusters";

/** svc's own commands, loaded lazily so that start-up stays fast. Anything else is kubectl's. */
export const subCommands = {
  version: () => import("./version.ts").then((m) => m.default),
  dev: () => import("./dev.ts").then((m) => m.default),
  curl: () => import("./curl.ts").then((m) => m.default),
  context: () => import("./context.ts").then((m) => m.default),
  identity: () => import("./identity.ts").then((m) => m.default),
  completion: () => import("./completion.ts").then((m) => m.default),
  notary: () => import("./notary.ts").then((m) => m.default),
};

export type OwnCommand = keyof typeof subCommands;

export function isOwnCommand(name: string | undefined): name is OwnCommand {
  return name !== undefined && Object.hasOwn(subCommands, name);
}
