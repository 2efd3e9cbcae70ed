import { isSvcError } from "../../lib/errors.ts";

/** The SvcError a call throws (any other error fails the test, as does no error). */
export function svcError(fn: () => unknown): { code: string; message: string } {
  try {
    fn();
  } catch (e) {
    if (isSvcError(e)) return { code: e.code, message: e.message };
    throw e;
  }
  throw new Error("expected an SvcError");
}

/** The SvcError a promise rejects with. */
export async function svcErrorOf(p: Promise<unknown>): Promise<{ code: string; message: string }> {
  try {
    await p;
  } catch (e) {
    if (isSvcError(e)) return { code: e.code, message: e.message };
    throw e;
  }
  throw new Error("expected an SvcError");
}
