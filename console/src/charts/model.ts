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
  const byX = new Map<number, Bucket>();
  for (const b of run.points) byX.set(xOf(b, mode, run.origin), b);
  const x = [...byX.keys()].sort((a, b) => a - b);
  const out: Columns = { x, mean: [], min: [], max: [], marks: [] };
  let lastFinite: number | null = null;
  for (const at of x) {
    const b = byX.get(at)!;
    out.mean.push(b.mean);
    out.min.push(b.min);
    out.max.push(b.max);
    const m = mark(b);
    if (m) out.marks.push({ x: at, kind: m, at: b.mean ?? lastFinite });
    if (b.mean !== null) lastFinite = b.mean;
  }
  return out;
}

// Several runs' columns on one x axis (the sorted union of their x values). Where a run has no
// point the value is `undefined`, which uPlot draws across (the line joins its neighbours);
// a run's own null (a bucket without a finite value) stays null: a gap in its line.
export type Cell = number | null | undefined;
export function align(xs: ReadonlyArray<ReadonlyArray<number>>, ys: ReadonlyArray<ReadonlyArray<ReadonlyArray<number | null>>>): { x: number[]; ys: Cell[][][] } {
  const all = new Set<number>();
  for (const list of xs) for (const v of list) all.add(v);
  const x = Float64Array.from(all).sort();
  const xsSorted = Array.from(x);
  if (xs.length === 1) return { x: xsSorted, ys: ys.map((cols) => cols.map((c) => c.slice())) };
  const index = new Map<number, number>();
  xsSorted.forEach((v, i) => index.set(v, i));
  const out = ys.map((cols, r) => {
    const at = xs[r].map((v) => index.get(v)!);
    return cols.map((col) => {
      const full: Cell[] = new Array<Cell>(x.length);
      for (let i = 0; i < at.length; i++) full[at[i]] = col[i];
      return full;
    });
  });
  return { x: xsSorted, ys: out };
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
