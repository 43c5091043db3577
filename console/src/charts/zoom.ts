// A zoom window (what the user dragged over, in the x axis's units) as a curve query: the API
// answers at most `points` buckets per run, and raw points (width 1) when the step range holds
// no more steps than that (domain/telemetry.py plan_view), so zooming far enough reaches every
// point as logged.
import type { XMode } from "./model";

export const POINTS = 1000;

export interface CurveQuery {
  points: number;
  start?: number;
  end?: number;
  start_time?: number;
  end_time?: number;
}

export interface Zoom {
  query: CurveQuery;
  raw: boolean; // the answer will hold every point (step windows only)
}

// ``origins``: for relative time, the first wall time of each run the query covers: the window
// [lo, hi] after each run's start, so the query spans the earliest start + lo to the latest + hi.
export function zoomQuery(mode: XMode, lo: number, hi: number, origins: ReadonlyArray<number> = [0], points = POINTS): Zoom {
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return { query: { points }, raw: false };
  if (hi < lo) [lo, hi] = [hi, lo];
  if (mode === "step") {
    const start = Math.max(0, Math.floor(lo));
    const end = Math.max(start, Math.ceil(hi));
    return { query: { points, start, end }, raw: end - start + 1 <= points };
  }
  const from = mode === "wall" ? lo : Math.min(...origins) + lo;
  const to = mode === "wall" ? hi : Math.max(...origins) + hi;
  return { query: { points, start_time: Math.max(0, from), end_time: Math.max(0, to) }, raw: false };
}
