/** Build information injected by `bun build --define` (see Makefile); "dev" when run from source. */
declare const SVC_VERSION: string | undefined;
declare const SVC_COMMIT: string | undefined;
declare const SVC_DATE: string | undefined;

export interface BuildInfo {
  version: string;
  commit: string;
  date: string;
  runtime: string;
  platform: string;
}

export function buildInfo(): BuildInfo {
  return {
    version: typeof SVC_VERSION === "string" ? SVC_VERSION : "dev",
    commit: typeof SVC_COMMIT === "string" ? SVC_COMMIT : "unknown",
    date: typeof SVC_DATE === "string" ? SVC_DATE : "unknown",
    runtime: `bun ${Bun.version}`,
    platform: `${process.platform}/${process.arch}`,
  };
}
