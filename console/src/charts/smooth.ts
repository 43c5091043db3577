// TensorBoard's scalar smoothing, to the letter (tensorboard/webapp/widgets/line_chart_v2/
// data_transformer.ts, classicSmoothing): a first-order IIR filter over the points in order
// (not over x distance), started at 0 and debiased by 1 - w^n, n the finite points seen so far.
//
// - the weight is clamped to [0, 1]; a weight that is not a finite number is 0 (no smoothing);
// - a series whose values are all equal (`==` to the first) is returned as it is, so floating
//   error never bends a flat line (TensorBoard issue #786);
// - a value that is not finite (NaN, ±Infinity) passes through as it is and neither feeds the
//   average nor counts; a gap (null, a bucket without a finite value) likewise stays a gap;
// - with weight 1 the debias factor is 1 and every finite value reads 0, as in TensorBoard (the
//   console's slider stops at 0.99).
export function ema(values: ReadonlyArray<number | null>, weight: number): (number | null)[] {
  const w = Number.isFinite(weight) ? Math.max(0, Math.min(weight, 1)) : 0;
  const first = values[0];
  if (values.every((v) => v == first)) return values.slice();
  let last = 0;
  let n = 0;
  return values.map((v) => {
    if (v === null || !Number.isFinite(v)) return v;
    last = last * w + (1 - w) * v;
    n++;
    return last / (w === 1 ? 1 : 1 - Math.pow(w, n));
  });
}
