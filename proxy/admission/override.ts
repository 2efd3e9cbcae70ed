/**
 * Whether a requester may override a compartment refusal: `force` on compartmentoverrides.svc.dev in the
 * namespace, asked of the API server with a SubjectAccessReview; answers are kept for OVERRIDE_TTL_MS.
 */
import { OVERRIDE_PERMISSION } from "../../lib/kube/clearance.ts";
import type { KubeClient } from "../../lib/kube/client.ts";
import type { UserInfo } from "./request.ts";

const OVERRIDE_TTL_MS = 10_000;
const OVERRIDE_CACHE_MAX = 10_000;

export class OverrideCheck {
  private readonly answers = new Map<string, { allowed: boolean; until: number }>();

  constructor(private readonly client: KubeClient) {}

  readonly canOverride = async (user: UserInfo, namespace: string): Promise<boolean> => {
    // Hashed: the user info comes from the caller and may be large.
    const key = new Bun.CryptoHasher("sha256")
      .update(JSON.stringify([user.username, user.uid, user.groups, user.extra, namespace]))
      .digest("hex");
    const hit = this.answers.get(key);
    if (hit && hit.until > Date.now()) return hit.allowed;
    const r = await this.client.authorization.createSubjectAccessReview({
      body: {
        spec: {
          ...(user.username ? { user: user.username } : {}),
          ...(user.uid ? { uid: user.uid } : {}),
          ...(user.groups ? { groups: user.groups } : {}),
          ...(user.extra ? { extra: user.extra } : {}),
          resourceAttributes: { ...OVERRIDE_PERMISSION, namespace },
        },
      },
    });
    const allowed = r.status?.allowed === true;
    if (this.answers.size >= OVERRIDE_CACHE_MAX) this.answers.clear();
    this.answers.set(key, { allowed, until: Date.now() + OVERRIDE_TTL_MS });
    return allowed;
  };
}
