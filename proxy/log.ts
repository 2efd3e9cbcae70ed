/**
 * Structured logs in the shape zap users know: JSON lines {"level","ts","msg",...fields} or a console
 * line "time LEVEL msg {fields}". Fields such as listener, peer and request id are bound with `with`. A
 * field that holds an Error is logged as its message; on a line at or above `stacktraceLevel`, its stack
 * is added as the field `stacktrace` (the first such error's).
 */
export const LEVELS = ["debug", "info", "warn", "error"] as const;
export type Level = (typeof LEVELS)[number];
export type Fields = Record<string, unknown>;

export interface Logger {
  debug(msg: string, fields?: Fields): void;
  info(msg: string, fields?: Fields): void;
  warn(msg: string, fields?: Fields): void;
  error(msg: string, fields?: Fields): void;
  with(fields: Fields): Logger;
  enabled(level: Level): boolean;
}

export const ENCODERS = ["json", "console"] as const;

export interface LogOptions {
  level: Level;
  encoder: (typeof ENCODERS)[number];
  stacktraceLevel?: Level;
  write?: (line: string) => void;
}

export function createLogger(o: LogOptions, bound: Fields = {}): Logger {
  const min = LEVELS.indexOf(o.level);
  const traceFrom = o.stacktraceLevel ? LEVELS.indexOf(o.stacktraceLevel) : LEVELS.length;
  const write = o.write ?? ((line: string) => process.stderr.write(line));
  const emit = (level: Level, msg: string, fields?: Fields) => {
    if (LEVELS.indexOf(level) < min) return;
    const all: Fields = { ...bound, ...fields };
    for (const [k, v] of Object.entries(all)) {
      if (!(v instanceof Error)) continue;
      all[k] = v.message;
      if (LEVELS.indexOf(level) >= traceFrom && v.stack && all.stacktrace === undefined)
        all.stacktrace = v.stack;
    }
    if (o.encoder === "json") {
      write(`${JSON.stringify({ level, ts: Date.now() / 1000, msg, ...all })}\n`);
    } else {
      const extra = Object.keys(all).length > 0 ? `\t${JSON.stringify(all)}` : "";
      write(`${new Date().toISOString()}\t${level.toUpperCase()}\t${msg}${extra}\n`);
    }
  };
  return {
    debug: (m, f) => emit("debug", m, f),
    info: (m, f) => emit("info", m, f),
    warn: (m, f) => emit("warn", m, f),
    error: (m, f) => emit("error", m, f),
    with: (fields) => createLogger(o, { ...bound, ...fields }),
    enabled: (level) => LEVELS.indexOf(level) >= min,
  };
}
