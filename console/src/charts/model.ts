// What the charts draw, from the API's curve buckets (GET /v1/jobs/{id}/metrics/curve), with no
// DOM: one Run per (job, attempt, sub-run), its buckets mapped onto the chosen x axis.
import type { Schemas } from "../api";

export type Bucket = Schemas["PointOut"];
export type XMode = "step" | "relative" | "wall";
export type Mark = "NaN" | "+inf" | "-inf";

export const X_MODES: ReadonlyArray<[XMode, string]> = [
  ["step", "Step"],
  ["relative", "Relative time (s)"],
  ["wall", "Wall time"],
];

export interface Run {
  key: string; // unique: job, attempt, run
  label: string; // what the legend says
  job: string;
  attempt: number;
  run: string;
  points: Bucket[];
  // Wall time (s) of the run's first point over its whole series: the origin of "relative time",
  // kept while zoomed (a zoomed answer starts later).
  origin: number;
  // Its place in the page's palette (a comparison keeps one colour per run across charts);
  // absent: its place in the chart.
  colour?: number;
}

// A value as logged: a number, or the API's spelling of a value JSON cannot hold.
export function num(v: number | "NaN" | "Infinity" | "-Infinity" | null): number {
  return v === null ? NaN : Number(v);
}

// What marks a bucket on its curve: a bucket whose last value was not finite, or one with
// points but no finite value (its mean is null: a gap in the line).
export function mark(b: Bucket): Mark | null {
  const last = num(b.last);
  if (Number.isFinite(last) && (b.mean !== null || b.count === 0)) return null;
  if (last === Infinity) return "+inf";
  if (last === -Infinity) return "-inf";
  return "NaN";
}

export function xOf(b: Bucket, mode: XMode, origin: number): number {
  if (mode === "step") return b.last_step;
  if (mode === "wall") return b.last_wall_time;
  return b.last_wall_time - origin;
}

export interface Columns {
  x: number[];
  mean: (number | null)[];
  min: (number | null)[];
  max: (number | null)[];
  marks: { x: number; kind: Mark; at: number | null }[]; // at: the last finite mean before it
}

// One run's columns on the x axis, in x order (a wall-time axis may reorder buckets whose
// clock went backwards). Two buckets on the same x: the later one wins.
export function columns(run: Run, mode: XMode): Columns {
  let points = run.points;
  let x = points.map((b) => xOf(b, mode, run.origin));
  let sorted = true;
  for (let i = 1; i < x.length && sorted; i++) sorted = x[i - 1] < x[i];
  if (!sorted) {
    // out of order or repeated x (a wall clock that went back): sort; the later bucket wins
    const byX = new Map<number, Bucket>();
    points.forEach((b, i) => byX.set(x[i], b));
    x = [...byX.keys()].sort((p, q) => p - q);
    points = x.map((at) => byX.get(at)!);
  }
  const n = points.length;
  const out: Columns = { x, mean: new Array(n), min: new Array(n), max: new Array(n), marks: [] };
  let lastFinite: number | null = null;
  for (let i = 0; i < n; i++) {
    const b = points[i];
    out.mean[i] = b.mean;
    out.min[i] = b.min;
    out.max[i] = b.max;
    const m = mark(b);
    if (m) out.marks.push({ x: x[i], kind: m, at: b.mean ?? lastFinite });
    if (b.mean !== null) lastFinite = b.mean;
  }
  return out;
}

// Several runs' columns on one x axis (the sorted union of their x values). Where a run has no
// point the value is `undefined`, which uPlot draws across (the line joins its neighbours);
// a run's own null (a bucket without a finite value) stays null: a gap in its line.
export type Cell = number | null | undefined;
export function align(xs: ReadonlyArray<ReadonlyArray<number>>, ys: ReadonlyArray<ReadonlyArray<ReadonlyArray<number | null>>>): { x: number[]; ys: Cell[][][] } {
  // Typed arrays sort numerically and fast; 20 runs × 1,000 points align in a few milliseconds.
  const buf = new Float64Array(xs.reduce((n, l) => n + l.length, 0));
  let k = 0;
  for (const list of xs) for (const v of list) buf[k++] = v;
  buf.sort();
  const x: number[] = [];
  for (let i = 0; i < buf.length; i++) if (i === 0 || buf[i] !== buf[i - 1]) x.push(buf[i]);
  if (xs.length === 1) return { x, ys: ys.map((cols) => cols.map((c) => c.slice())) };
  const find = (v: number): number => {
    let lo = 0;
    let hi = x.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (x[mid] < v) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  const out = ys.map((cols, r) => {
    const at = xs[r].map(find);
    return cols.map((col) => {
      const full: Cell[] = new Array<Cell>(x.length);
      for (let i = 0; i < at.length; i++) full[at[i]] = col[i];
      return full;
    });
  });
  return { x, ys: out };
}

// A log-scale axis cannot show zero or a negative value: such points are not drawn and counted.
export function forLog(values: ReadonlyArray<number | null>): { values: (number | null)[]; dropped: number } {
  let dropped = 0;
  const out = values.map((v) => {
    if (v !== null && v <= 0) {
      dropped++;
      return null;
    }
    return v;
  });
  return { values: out, dropped };
}

// The runs of one job's curve answer: one per (attempt, sub-run), member 0 of each, labelled
// "attempt 1 · acc/train" (prefixed with the job in a comparison).
export function runsOf(job: string, curve: Schemas["CurveOut"], prefix = ""): Run[] {
  return curve.attempts.map((a) => ({
    key: JSON.stringify([job, a.attempt, a.run]),
    label: `${prefix}attempt ${a.attempt}` + (a.run ? ` · ${a.run}` : ""),
    job,
    attempt: a.attempt,
    run: a.run,
    points: a.points,
    origin: a.points.length ? a.points[0].first_wall_time : 0,
  }));
}
