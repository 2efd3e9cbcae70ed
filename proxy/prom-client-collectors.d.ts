/** prom-client's default process collectors, which its package ships untyped (proxy/metrics.ts). */
declare module "prom-client/lib/metrics/*.js" {
  const collect: (registry: import("prom-client").Registry, config: object) => void;
  export default collect;
}
