import { describe, expect, it } from "vitest";
import { ema } from "../src/charts/smooth";

// TensorBoard's classicSmoothing by hand: last = last*w + (1-w)*v; out = last / (1 - w^n).
describe("ema (TensorBoard's smoothing)", () => {
  it("debiases: the first value is itself, then the average moves", () => {
    const out = ema([1, 2, 3], 0.5);
    expect(out[0]).toBeCloseTo(1);
    expect(out[1]).toBeCloseTo((0.5 * 0.5 + 0.5 * 2) / (1 - 0.25)); // 1.6667
    expect(out[2]).toBeCloseTo(((0.5 * 0.5 + 0.5 * 2) * 0.5 + 0.5 * 3) / (1 - 0.125));
  });
  it("weight 0 is the data; an out-of-range or non-finite weight is clamped or 0", () => {
    expect(ema([3, 1, 2], 0)).toEqual([3, 1, 2]);
    expect(ema([3, 1, 2], -4)).toEqual([3, 1, 2]);
    expect(ema([3, 1, 2], NaN)).toEqual([3, 1, 2]);
    expect(ema([3, 1, 2], 7)).toEqual([0, 0, 0]); // clamped to 1: as TensorBoard, every value reads 0
  });
  it("empty, one point, a constant series are returned as they are", () => {
    expect(ema([], 0.9)).toEqual([]);
    expect(ema([5], 0.9)).toEqual([5]);
    expect(ema([0.1, 0.1, 0.1], 0.9)).toEqual([0.1, 0.1, 0.1]);
  });
  it("NaN and ±inf pass through and neither feed the average nor count", () => {
    const out = ema([1, NaN, Infinity, 3, -Infinity], 0.5);
    expect(out[1]).toBeNaN();
    expect(out[2]).toBe(Infinity);
    expect(out[4]).toBe(-Infinity);
    expect(out[3]).toBeCloseTo(ema([1, 3], 0.5)[1]!); // as if the two were not there
  });
  it("gaps (null) stay gaps and are skipped like non-finite values", () => {
    expect(ema([1, null, 3], 0.5)).toEqual([1, null, ema([1, 3], 0.5)[1]]);
    expect(ema([null, null], 0.5)).toEqual([null, null]);
  });
  it("all NaN stays all NaN", () => {
    const out = ema([NaN, NaN], 0.9);
    expect(out.every((v) => Number.isNaN(v))).toBe(true);
  });
  it("huge and negative values neither overflow nor change sign", () => {
    const out = ema([-1e300, -1e300 * 1.5, -1e300], 0.99);
    for (const v of out) {
      expect(Number.isFinite(v)).toBe(true);
      expect(v!).toBeLessThan(0);
    }
  });
});
