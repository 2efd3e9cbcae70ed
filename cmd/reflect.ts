/**
 * @peculiar/x509 (through tsyringe) needs the reflect-metadata polyfill installed before it is evaluated.
 * In a compiled binary a static `import "reflect-metadata"` next to it is not evaluated early enough, so
 * commands that use X.509 await this first; commands that do not (svc version) never pay for it.
 */
export async function loadReflectMetadata(): Promise<void> {
  await import("reflect-metadata");
}
