import { decodeJwt } from "jose";
import type { WorkloadApiClient } from "./workload-client.ts";

/**
 * JWT-SVIDs of this workload from the Workload API, one per audience, reused until half their lifetime
 * has passed (SPIRE issues them for minutes; fetching one per use would load the agent).
 */
export class JwtSvidSource {
  private readonly cache = new Map<string, { token: string; refreshAt: number }>();

  constructor(
    private readonly client: WorkloadApiClient,
    private readonly spiffeId = "",
  ) {}

  async fetch(audience: string): Promise<string> {
    const hit = this.cache.get(audience);
    if (hit && Date.now() < hit.refreshAt) return hit.token;
    const [svid] = await this.client.fetchJwtSvids([audience], this.spiffeId);
    const token = (svid as { svid: string }).svid;
    const { iat, exp } = decodeJwt(token);
    const now = Date.now();
    const refreshAt = exp ? (iat ? ((iat + exp) / 2) * 1000 : exp * 1000 - 30_000) : now;
    this.cache.set(audience, { token, refreshAt });
    return token;
  }
}
