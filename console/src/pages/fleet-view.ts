// The Fleet page's pure parts (no DOM, unit-tested in console/test/fleet-view.test.ts): how full
// a node or pool is, and a node's connectivity over a window as segments.
import type { Schemas } from "../api";

type Change = Schemas["ConnectivityChangeOut"];

export const WINDOW_MS = 24 * 3_600_000; // the history strip covers the last 24 h

const num = (n: number): string => (Number.isInteger(n) ? String(n) : n.toFixed(1));

// "2 of 8 reserved (25%)"; a resource a node does not have is "none".
export function usage(used: number, total: number): string {
  if (total <= 0) return "none";
  return `${num(used)} of ${num(total)} reserved (${Math.round((100 * used) / total)}%)`;
}

export interface Segment {
  connectivity: string;
  from: number; // ms since the epoch, clipped to the window
  to: number;
  share: number; // of the window, 0..1
}

// The node's connectivity from its oldest known change (at most 24 h back) to now, from its
// changes (newest first, as the API gives them): one segment per state held, oldest first,
// each with its share of that span. Without any change the state is "unknown" over the span.
export function segments(changes: readonly Change[], now: number, window = WINDOW_MS): Segment[] {
  const oldestFirst = [...changes].map((c) => ({ at: Date.parse(c.at), connectivity: c.connectivity })).filter((c) => !Number.isNaN(c.at) && c.at <= now).sort((a, b) => a.at - b.at);
  const start = Math.max(now - window, oldestFirst[0]?.at ?? now - window);
  const span = Math.max(1, now - start);
  const out: Segment[] = [];
  const push = (connectivity: string, from: number, to: number): void => {
    const f = Math.max(from, start);
    const t = Math.min(to, now);
    if (t <= f) return;
    const last = out[out.length - 1];
    if (last && last.connectivity === connectivity && last.to === f) {
      last.to = t;
      last.share = (last.to - last.from) / span;
    } else out.push({ connectivity, from: f, to: t, share: (t - f) / span });
  };
  if (oldestFirst.length === 0) push("unknown", start, now);
  oldestFirst.forEach((c, i) => push(c.connectivity, c.at, oldestFirst[i + 1]?.at ?? now));
  return out;
}

// The strip's text alternative: each segment with its times, in words, oldest first.
export function describe(segs: readonly Segment[], time: (ms: number) => string): string {
  if (segs.length === 0) return "nothing known";
  return segs.map((s) => `${s.connectivity} from ${time(s.from)} to ${time(s.to)}`).join("; ");
}
