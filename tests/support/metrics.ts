/** The value of the first sample of /metrics on the loopback `port` whose line starts with `name` (0 when absent). */
export async function metricValue(port: number, name: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(name));
  return line ? Number(line.split(" ").pop()) : 0;
}
