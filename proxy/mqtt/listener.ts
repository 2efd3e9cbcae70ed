import { SvcError } from "../../lib/errors.ts";
import type { ListenerConfig } from "../config/validate.ts";
import type { RunningListener } from "../listener.ts";

export function startMqttListener(l: ListenerConfig): Promise<RunningListener> {
  throw new SvcError("usage", `listener ${l.name}: mqtt listeners are not available in this build yet`);
}
