/**
 * The user name a service account authenticates as, `system:serviceaccount:<namespace>:<name>`, in both
 * directions.
 */
export const ACCOUNT_PREFIX = "system:serviceaccount:";
const ACCOUNT = /^system:serviceaccount:([^:]+):([^:]+)$/;

/** The account a user name is; undefined when the name has another shape. */
export function serviceAccountOf(username: string): { namespace: string; name: string } | undefined {
  const m = ACCOUNT.exec(username);
  return m ? { namespace: m[1] as string, name: m[2] as string } : undefined;
}

export const accountUsername = (namespace: string, name: string) => `${ACCOUNT_PREFIX}${namespace}:${name}`;
