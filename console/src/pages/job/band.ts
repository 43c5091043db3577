// The attempts of a job on one time axis (pure: no DOM, unit-tested in console/test/band.test.ts).
// Each attempt is a segment from its creation to its last change (to `now` while it runs),
// labelled with how it ended; the gap before the next attempt started is its backoff.

export interface BandAttempt {
  number: number;
  state: string;
  end: string; // how it ended (node-lost, preempted, …); "" while it runs or when it succeeded
  reason: string | null;
  created_at: string;
  updated_at: string;
}

export interface Segment {
  number: number;
  start: number; // ms since the epoch
  stop: number;
  live: boolean; // still running: its stop is `now`
  outcome: string; // "node-lost", "succeeded", "running", …
  left: number; // percent of the axis
  width: number; // percent of the axis, at least MIN_WIDTH so a short attempt stays visible
  gapAfter: number | null; // ms until the next attempt started; null for the last
  words: string; // the same facts as a sentence, for screen readers and the tooltip
}

export const MIN_WIDTH = 1.5;
const LIVE = new Set(["launching", "running", "stopping"]);

// "45 s", "2 min 5 s", "1 h 3 min": a duration in words.
export function duration(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min${s % 60 ? ` ${s % 60} s` : ""}`;
  const m = Math.floor(s / 60);
  return `${Math.floor(m / 60)} h${m % 60 ? ` ${m % 60} min` : ""}`;
}

export function outcome(a: BandAttempt): string {
  if (LIVE.has(a.state)) return a.state;
  return a.end || a.state;
}

export function band(attempts: BandAttempt[], now: number, when: (iso: string) => string): { segments: Segment[]; start: number; stop: number } {
  const sorted = [...attempts].sort((x, y) => x.number - y.number);
  const raw = sorted.map((a) => {
    const live = LIVE.has(a.state);
    const start = Date.parse(a.created_at);
    const stop = live ? Math.max(now, start) : Math.max(Date.parse(a.updated_at), start);
    return { a, live, start, stop };
  });
  if (!raw.length) return { segments: [], start: now, stop: now };
  const start = Math.min(...raw.map((r) => r.start));
  const stop = Math.max(...raw.map((r) => r.stop), start + 1000); // an axis of at least 1 s
  const span = stop - start;
  const segments = raw.map((r, i): Segment => {
    const next = raw[i + 1];
    const gapAfter = next ? Math.max(0, next.start - r.stop) : null;
    const how = outcome(r.a);
    const left = ((r.start - start) / span) * 100;
    const width = Math.min(Math.max(((r.stop - r.start) / span) * 100, MIN_WIDTH), 100 - Math.min(left, 100 - MIN_WIDTH));
    const ended = r.live ? `running since ${when(r.a.created_at)} (${duration(r.stop - r.start)} so far)` : `${when(r.a.created_at)} to ${when(r.a.updated_at)} (${duration(r.stop - r.start)}), ended ${how}`;
    const why = r.a.reason ? `: ${r.a.reason}` : "";
    const then = gapAfter !== null ? `; attempt ${next!.a.number} started ${duration(gapAfter)} later, at ${when(next!.a.created_at)}` : "";
    return { number: r.a.number, start: r.start, stop: r.stop, live: r.live, outcome: how, left: Math.min(left, 100 - MIN_WIDTH), width, gapAfter, words: `Attempt ${r.a.number}: ${ended}${why}${then}.` };
  });
  return { segments, start, stop };
}
