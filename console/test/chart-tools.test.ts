import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { fileName, toCSV, toJSON, type Row } from "../src/charts/exports";
import { parseJobs } from "../src/charts/jobs-param";
import { contrast, SERIES, style } from "../src/charts/palette";
import { groupTags, matches } from "../src/charts/tags";
import { fmt, stepTicks } from "../src/charts/ticks";
import { zoomQuery } from "../src/charts/zoom";

describe("zoom requests", () => {
  it("a step window asks for whole steps; a narrow one comes back raw", () => {
    expect(zoomQuery("step", 100.4, 149.6)).toEqual({ query: { points: 1000, start: 100, end: 150 }, raw: true });
    expect(zoomQuery("step", 0, 5000)).toEqual({ query: { points: 1000, start: 0, end: 5000 }, raw: false });
    expect(zoomQuery("step", 0, 999).raw).toBe(true); // 1,000 steps fit 1,000 buckets: width 1
  });
  it("a window before step 0 is clamped; a reversed one is put right; a point is one step", () => {
    expect(zoomQuery("step", -50, -10).query).toEqual({ points: 1000, start: 0, end: 0 });
    expect(zoomQuery("step", 20, 10).query).toEqual({ points: 1000, start: 10, end: 20 });
  });
  it("time windows: wall time as is, relative time from the earliest to the latest run start", () => {
    expect(zoomQuery("wall", 1.7e9, 1.7e9 + 60).query).toEqual({ points: 1000, start_time: 1.7e9, end_time: 1.7e9 + 60 });
    expect(zoomQuery("relative", 10, 20, [1000, 1500]).query).toEqual({ points: 1000, start_time: 1010, end_time: 1520 });
  });
  it("a window that is not a number asks for the whole series", () => {
    expect(zoomQuery("step", NaN, 5)).toEqual({ query: { points: 1000 }, raw: false });
  });
});

describe("step ticks", () => {
  it("a 5-step curve gets whole-step ticks, never fractions", () => {
    const ticks = stepTicks(0, 4, 10);
    expect(ticks).toEqual([0, 1, 2, 3, 4]);
    for (const [min, max, n] of [[0, 1, 10], [3.2, 7.9, 20], [0, 1e9, 8], [-10, 10, 5]]) {
      for (const t of stepTicks(min, max, n)) expect(Number.isInteger(t)).toBe(true);
    }
  });
  it("bounded by the count asked; nothing for an empty or broken range", () => {
    expect(stepTicks(0, 1_000_000, 5).length).toBeLessThanOrEqual(6);
    expect(stepTicks(5, 1, 5)).toEqual([]);
    expect(stepTicks(NaN, 1, 5)).toEqual([]);
  });
  it("numbers read short, and NaN / infinities in words", () => {
    expect(fmt(0.123456)).toBe("0.12346");
    expect(fmt(1e-7)).toBe("1.000e-7");
    expect(fmt(NaN)).toBe("NaN");
    expect(fmt(-Infinity)).toBe("−∞");
    expect(fmt(null)).toBe("—");
  });
});

describe("tags by prefix", () => {
  it("train, eval, sys first, then others, then tags without a prefix; filtered by every word", () => {
    const tags = ["lr", "sys/gpu0/util", "zeta/x", "eval/acc", "train/loss", "train/acc", "alpha/y", "train/loss"];
    expect(groupTags(tags).map((g) => [g.group, g.tags])).toEqual([
      ["train", ["train/acc", "train/loss"]],
      ["eval", ["eval/acc"]],
      ["sys", ["sys/gpu0/util"]],
      ["alpha", ["alpha/y"]],
      ["zeta", ["zeta/x"]],
      ["", ["lr"]],
    ]);
    expect(groupTags(tags, "ACC train").map((g) => g.tags)).toEqual([["train/acc"]]);
    expect(groupTags(tags, "nothing")).toEqual([]);
    expect(matches("/leading", "lead")).toBe(true);
    expect(groupTags(["/x"])[0].group).toBe(""); // a leading slash is no prefix
  });
});

describe("the jobs of a comparison", () => {
  it("trimmed, repeats and empties dropped, at most 20 (the rest counted)", () => {
    expect(parseJobs(" a, b,,a ,c")).toEqual({ jobs: ["a", "b", "c"], dropped: 0 });
    const many = Array.from({ length: 25 }, (_, i) => `j${i}`).join(",");
    expect(parseJobs(many)).toEqual({ jobs: Array.from({ length: 20 }, (_, i) => `j${i}`), dropped: 5 });
    expect(parseJobs(null)).toEqual({ jobs: [], dropped: 0 });
    expect(parseJobs("a\u0000b,ok," + "x".repeat(300))).toEqual({ jobs: ["ok"], dropped: 0 });
  });
});

const row = (over: Partial<Row>): Row => ({ run: "j1 · attempt 1", job: "j1", attempt: 1, sub_run: "", step: 3, wall_time: 1700000000.5, x: 3, value: 0.5, smoothed: 0.45, min: 0.4, max: 0.6, last: 0.55, count: 2, ...over });

describe("CSV and JSON of what is shown", () => {
  it("a header naming the x axis, one line per point, empty for no value, logged NaN as text", () => {
    const csv = toCSV([row({}), row({ step: 4, x: 4, value: null, smoothed: null, min: null, max: null, last: "NaN" })], "Step");
    expect(csv.split("\r\n")).toEqual([
      "run,job,attempt,sub_run,step,wall_time,Step,value,smoothed,min,max,last,count",
      "j1 · attempt 1,j1,1,,3,1700000000.5,3,0.5,0.45,0.4,0.6,0.55,2",
      "j1 · attempt 1,j1,1,,4,1700000000.5,4,,,,,NaN,2",
      "",
    ]);
  });
  it("quotes commas, quotes and newlines, and defuses spreadsheet formulas", () => {
    const csv = toCSV([row({ run: 'a,"b"\nc', sub_run: "=HYPERLINK(1)", job: "-j" })], "Step");
    const line = csv.split("\r\n").slice(1).join("\r\n");
    expect(line.startsWith('"a,""b""\nc",\'-j,1,\'=HYPERLINK(1),')).toBe(true);
  });
  it("JSON keeps the settings and window, and nothing when nothing is shown", () => {
    expect(JSON.parse(toJSON("train/loss", "step", 0.6, [10, 20], [row({})]))).toMatchObject({ tag: "train/loss", x: "step", smoothing: 0.6, window: [10, 20], rows: [{ step: 3 }] });
    expect(JSON.parse(toJSON("t", "wall", 0, null, []))).toEqual({ tag: "t", x: "wall", smoothing: 0, window: null, rows: [] });
    expect(toCSV([], "Step").split("\r\n")).toHaveLength(2);
  });
  it("file names keep safe characters only", () => {
    expect(fileName("train/loss", "csv")).toBe("train_loss.csv");
    expect(fileName("../../etc\u0000", "json")).toBe(".._.._etc_.json");
    expect(fileName("", "csv")).toBe("chart.csv");
  });
});

// The palette (charts.css) against the chart's background (style.css's --surface), per scheme.
function vars(css: string): [Record<string, string>, Record<string, string>] {
  const [light, dark] = css.split("@media (prefers-color-scheme: dark)");
  const read = (s: string) => Object.fromEntries([...s.matchAll(/(--[a-z0-9-]+):\s*(#[0-9a-f]{6})/gi)].map((m) => [m[1], m[2]]));
  return [read(light), read(dark)];
}

describe("series colours", () => {
  const [themeLight, themeDark] = vars(readFileSync(new URL("../src/style.css", import.meta.url), "utf8"));
  const [light, dark] = vars(readFileSync(new URL("../src/charts/charts.css", import.meta.url), "utf8"));
  it.each([["light", light, themeLight], ["dark", dark, themeDark]])("keep 3:1 contrast on --surface (%s)", (_name, palette, theme) => {
    for (let i = 0; i < SERIES; i++) {
      const colour = palette[`--series-${i}`];
      expect(colour, `--series-${i}`).toBeDefined();
      expect(contrast(colour, theme["--surface"]), `--series-${i} ${colour}`).toBeGreaterThanOrEqual(3);
    }
  });
  it("past the palette, colours repeat dashed", () => {
    expect(style(0)).toEqual({ colour: 0, dashed: false });
    expect(style(12)).toEqual({ colour: 0, dashed: true });
    expect(style(25)).toEqual({ colour: 1, dashed: false });
  });
});
