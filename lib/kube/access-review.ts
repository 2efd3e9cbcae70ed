/**
 * A SelfSubjectAccessReview (authorization.k8s.io/v1) of one question, written out for `kubectl create
 * -f -`: `kubectl auth can-i` looks a resource up in discovery first, and svc's resources
 * (compartmentoverrides and compartmentclearances in group svc.dev) are names for RBAC and the compartment
 * webhook only, served nowhere; can-i would ask about another name.
 */
export function selfAccessReview(attributes: {
  group: string;
  resource: string;
  verb: string;
  namespace?: string;
}): string {
  return JSON.stringify({
    apiVersion: "authorization.k8s.io/v1",
    kind: "SelfSubjectAccessReview",
    spec: { resourceAttributes: attributes },
  });
}

/** kubectl's arguments that send a review on standard input and print its answer in `output` format. */
export const reviewArgs = (output: string) => ["create", "--validate=false", "-f", "-", "-o", output];
