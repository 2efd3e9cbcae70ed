/**
 * @peculiar/x509 (through tsyringe) needs the reflect-metadata polyfill installed before it is evaluated.
 * In a compiled binary a static `import "reflect-metadata"` next to it is not evaluated early enough, so
 * `svc dev` (the only command that issues certificates) awaits this before loading the development CA.
 */
export async function loadReflectMetadata(): Promise<void> {
  await import("reflect-metadata");
}
