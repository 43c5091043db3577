// Axis ticks. Steps are whole numbers: a 5-step curve gets ticks 0, 1, 2, 3, 4, never 0.5.

// The increments a step axis may use: 1, 2, 5, 10, 20, 50, … (never below 1).
export const STEP_INCRS: number[] = [];
for (let p = 1; p <= 1e15; p *= 10) STEP_INCRS.push(p, 2 * p, 5 * p);

// Whole-number ticks between min and max, at most about ``count`` of them.
export function stepTicks(min: number, max: number, count: number): number[] {
  if (!Number.isFinite(min) || !Number.isFinite(max) || max < min) return [];
  const span = max - min;
  const want = Math.max(1, Math.floor(count));
  const incr = STEP_INCRS.find((i) => span / i <= want) ?? STEP_INCRS[STEP_INCRS.length - 1];
  const ticks: number[] = [];
  for (let t = Math.ceil(min / incr) * incr; t <= max && ticks.length <= want + 1; t += incr) ticks.push(t);
  return ticks;
}

// A number for a legend or an axis: short, exact enough, and NaN/±∞ in words.
export function fmt(v: number | null | undefined): string {
  if (v === null || v === undefined) return "—";
  if (Number.isNaN(v)) return "NaN";
  if (v === Infinity) return "+∞";
  if (v === -Infinity) return "−∞";
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(3);
  return String(Number(v.toPrecision(5)));
}
