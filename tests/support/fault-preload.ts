/**
 * Preloaded (`bun --preload`) into an svc-proxy under test: on SIGUSR2 it throws from a timer and leaves a
 * promise rejected, outside any connection's handling, as a fault of the proxy's own that escaped would.
 */
process.on("SIGUSR2", () => {
  setTimeout(() => {
    throw new Error("injected fault");
  });
  void Promise.reject(new Error("injected rejection"));
});
