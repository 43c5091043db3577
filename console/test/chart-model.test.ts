import { describe, expect, it } from "vitest";
import { align, type Bucket, columns, forLog, mark, runsOf, xOf } from "../src/charts/model";

const b = (step: number, mean: number | null, extra: Partial<Bucket> = {}): Bucket => ({
  first_step: step, last_step: step, min: mean, max: mean, mean, last: mean ?? "NaN", count: 1,
  first_wall_time: 1000 + step, last_wall_time: 1000 + step, ...extra,
});

describe("runs from a curve answer", () => {
  it("one run per (attempt, sub-run), labelled, with its first wall time as origin", () => {
    const runs = runsOf("j1", { tag: "acc", start: 0, end: 9, width: 1, merged: [], attempts: [
      { attempt: 1, member_id: "m", source: "s", shown: [[0, 9]], run: "acc/train", points: [b(0, 1), b(9, 2)] },
      { attempt: 2, member_id: "m", source: "s", shown: [[0, 9]], run: "", points: [] },
    ] }, "j1 · ");
    expect(runs.map((r) => r.label)).toEqual(["j1 · attempt 1 · acc/train", "j1 · attempt 2"]);
    expect(runs[0].origin).toBe(1000);
    expect(new Set(runs.map((r) => r.key)).size).toBe(2);
  });
});

describe("x modes", () => {
  it("step, relative to the run's first point, and wall time", () => {
    const p = b(5, 1);
    expect(xOf(p, "step", 1000)).toBe(5);
    expect(xOf(p, "relative", 1000)).toBe(5);
    expect(xOf(p, "wall", 1000)).toBe(1005);
  });
  it("a wall-time axis sorts buckets whose clock went backwards; the same x: the later wins", () => {
    const run = { key: "k", label: "l", job: "j", attempt: 1, run: "", origin: 0, points: [b(0, 1, { last_wall_time: 50 }), b(1, 2, { last_wall_time: 40 }), b(2, 3, { last_wall_time: 40 })] };
    const c = columns(run, "wall");
    expect(c.x).toEqual([40, 50]);
    expect(c.mean).toEqual([3, 1]);
  });
});

describe("non-finite marks", () => {
  it("a bucket of no finite value, or whose last value was not finite, is marked by kind", () => {
    expect(mark(b(0, 1))).toBeNull();
    expect(mark(b(0, null, { last: "NaN" }))).toBe("NaN");
    expect(mark(b(0, null, { last: "Infinity" }))).toBe("+inf");
    expect(mark(b(0, 2, { last: "-Infinity" }))).toBe("-inf");
  });
  it("a NaN is marked where the line broke (the last finite mean before it)", () => {
    const run = { key: "k", label: "l", job: "j", attempt: 1, run: "", origin: 0, points: [b(0, 4), b(1, null), b(2, 5)] };
    expect(columns(run, "step").marks).toEqual([{ x: 1, kind: "NaN", at: 4 }]);
    const first = { ...run, points: [b(0, null)] };
    expect(columns(first, "step").marks).toEqual([{ x: 0, kind: "NaN", at: null }]);
  });
});

describe("aligning runs on one x axis (bucket merging)", () => {
  it("the sorted union of x; a run is undefined (drawn across) where it has no point", () => {
    const out = align([[0, 10, 20], [5, 10]], [[[1, 2, 3]], [[7, 8]]]);
    expect(out.x).toEqual([0, 5, 10, 20]);
    expect(out.ys[0][0]).toEqual([1, undefined, 2, 3]);
    expect(out.ys[1][0]).toEqual([undefined, 7, 8, undefined]);
  });
  it("a run's own gap (null) stays null, so its line breaks there and only there", () => {
    const out = align([[0, 1, 2], [0.5]], [[[1, null, 3]], [[9]]]);
    expect(out.ys[0][0]).toEqual([1, undefined, null, 3]);
  });
  it("negative and huge x sort as numbers", () => {
    expect(align([[1e15, -5], [2]], [[[1, 2]], [[3]]]).x).toEqual([-5, 2, 1e15]);
  });
  it("empty runs and no runs", () => {
    expect(align([], [])).toEqual({ x: [], ys: [] });
    expect(align([[], [1]], [[[]], [[9]]]).ys).toEqual([[[undefined]], [[9]]]);
  });
  it("20 runs of 1,000 buckets each on different grids stay bounded by their union", () => {
    const xs = Array.from({ length: 20 }, (_, r) => Array.from({ length: 1000 }, (_, i) => i * (r + 1)));
    const ys = xs.map((x) => [x.map((v) => v / 2)]);
    const out = align(xs, ys);
    expect(out.x.length).toBeLessThanOrEqual(20_000);
    expect(out.ys[3][0].filter((v) => v !== undefined)).toHaveLength(1000);
  });
});

describe("log scale", () => {
  it("zero and negative values are not drawn and are counted; null stays null", () => {
    expect(forLog([1, 0, -3, null, 1e-300, 1e300])).toEqual({ values: [1, null, null, null, 1e-300, 1e300], dropped: 2 });
    expect(forLog([])).toEqual({ values: [], dropped: 0 });
  });
});
