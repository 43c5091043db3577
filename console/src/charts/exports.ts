// CSV and JSON of what a chart shows: the visible runs, the points inside the zoom window, the
// x axis chosen and the smoothed value next to the logged one.
export interface Row {
  run: string; // the legend's label
  job: string;
  attempt: number;
  sub_run: string;
  step: number;
  wall_time: number;
  x: number;
  value: number | null; // the bucket's mean (null: no finite value)
  smoothed: number | null;
  min: number | null;
  max: number | null;
  last: number | string; // as logged: a number or "NaN" / "Infinity" / "-Infinity"
  count: number;
}

export const COLUMNS: (keyof Row)[] = ["run", "job", "attempt", "sub_run", "step", "wall_time", "x", "value", "smoothed", "min", "max", "last", "count"];

// A spreadsheet runs a cell that starts with = + - @ (or a tab / carriage return) as a formula:
// such text cells get a leading apostrophe. Numbers are written as numbers.
function cell(v: unknown): string {
  if (v === null || v === undefined) return "";
  if (typeof v === "number") return Number.isFinite(v) ? String(v) : String(v);
  let s = String(v);
  if (/^[=+\-@\t\r]/.test(s)) s = "'" + s;
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

export function toCSV(rows: ReadonlyArray<Row>, xLabel: string): string {
  const header = COLUMNS.map((c) => (c === "x" ? xLabel : c));
  return [header.map(cell).join(","), ...rows.map((r) => COLUMNS.map((c) => cell(r[c])).join(","))].join("\r\n") + "\r\n";
}

export function toJSON(tag: string, xMode: string, smoothing: number, window: [number, number] | null, rows: ReadonlyArray<Row>): string {
  return JSON.stringify({ tag, x: xMode, smoothing, window, rows }, null, 1);
}

// A file name from a tag: letters, digits, dot, dash and underscore only.
export function fileName(tag: string, ext: string): string {
  return `${tag.replace(/[^A-Za-z0-9._-]+/g, "_").slice(0, 100) || "chart"}.${ext}`;
}
