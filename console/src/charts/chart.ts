// One metric as an interactive chart card: several runs overlaid (one colour per run, from the
// theme), TensorBoard's smoothing with the raw curve faint behind, min/max bands from the
// buckets, log y, x as step / relative / wall time, NaN and ±∞ marked on the curve, a legend
// that hides (click) and highlights (hover, focus) each run, drag to zoom (the window is asked
// of the API again, down to raw points) and double-click (or Escape) to reset, CSV and JSON of
// what is shown, and refresh() that keeps the zoom. The maths is in the DOM-free modules beside.
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import "./charts.css";
import { h } from "../dom";
import { type Row, fileName, toCSV, toJSON } from "./exports";
import { type Columns, type Run, align, columns, forLog, num, xOf, X_MODES } from "./model";
import { drawMarks } from "./marks";
import { style } from "./palette";
import type { Settings, SettingsStore } from "./settings";
import { ema } from "./smooth";
import { fmt, stepTicks } from "./ticks";
import { type CurveQuery, POINTS, zoomQuery } from "./zoom";

// The runs of one chart for a query per job (null window: the whole series).
export type Fetch = (query: (job: string) => CurveQuery) => Promise<Run[]>;

export interface ChartCard {
  el: HTMLElement;
  refresh(): Promise<void>; // fetch again (the zoomed window, if any) and redraw
  destroy(): void;
}

const css = (name: string): string => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

function withAlpha(colour: string, alpha: number): string {
  const m = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(colour);
  if (!m) return colour;
  return `rgba(${parseInt(m[1], 16)}, ${parseInt(m[2], 16)}, ${parseInt(m[3], 16)}, ${alpha})`;
}

interface Drawn {
  run: Run;
  cols: Columns;
  shown: (number | null | undefined)[]; // smoothed (or raw when smoothing is off), as drawn
  first: number; // its first series' index in the plot
  count: number; // how many plot series it has
  colour: string;
  dashed: boolean;
}

export function chartCard(tag: string, fetchRuns: Fetch, store: SettingsStore, width: number): ChartCard {
  const narrow = width < 800; // a tablet (820 px wide) or narrower: the legend goes under the plot
  // A first guess; once in the page the plot takes its grid column's width (two thirds of the
  // card, all of it when narrow) and follows it when the window is resized.
  let plotWidth = Math.max(240, Math.floor(narrow ? width - 20 : ((width - 28) * 2) / 3));
  const box = h("figure", { class: "chart", "data-tag": tag });
  const target = h("div", { class: "chart-plot", role: "img", tabindex: "0" });
  const describe = (): void =>
    target.setAttribute("aria-label", `Line chart of ${tag} by ${store.value.xMode === "step" ? "step" : store.value.xMode === "wall" ? "wall time" : "relative time"}; drag or press + to zoom, double-click or Escape to reset`);
  describe();
  const legend = h("ul", { class: "legend", "aria-label": `Runs of ${tag}` });
  const note = h("p", { class: "chart-note", "aria-live": "polite" });
  const reset = h("button", { type: "button", disabled: true }, "Reset zoom");
  const csv = h("button", { type: "button" }, "CSV");
  const json = h("button", { type: "button" }, "JSON");
  csv.setAttribute("aria-label", `Download ${tag} as CSV`);
  json.setAttribute("aria-label", `Download ${tag} as JSON`);
  box.append(
    h("div", { class: "chart-head" }, h("figcaption", {}, tag), h("span", { class: "tools" }, reset, csv, json)),
    h("div", { class: `chart-body${narrow ? " narrow" : ""}` }, target, legend),
    note,
  );

  let runs: Run[] = [];
  const origins = new Map<string, number>(); // run key → first wall time of its whole series
  const hidden = new Set<string>();
  let highlight: string | null = null;
  let zoom: [number, number] | null = null;
  let plot: uPlot | null = null;
  let layout = "";
  let drawn: Drawn[] = [];
  let busy = false;
  let started = 0; // performance.now() when the latest draw began

  const query = (job: string): CurveQuery => {
    if (!zoom) return { points: POINTS };
    const mine = runs.filter((r) => r.job === job).map((r) => origins.get(r.key) ?? r.origin);
    return zoomQuery(store.value.xMode, zoom[0], zoom[1], mine.length ? mine : [0]).query;
  };

  const load = async (): Promise<void> => {
    const got = await fetchRuns(query);
    for (const r of got) {
      if (!zoom || !origins.has(r.key)) origins.set(r.key, r.origin);
      r.origin = origins.get(r.key)!;
    }
    runs = got;
    draw();
  };

  const valueAt = (d: Drawn, idx: number | null | undefined): string => {
    if (idx !== null && idx !== undefined && plot) {
      const v = (plot.data[d.first] as (number | null | undefined)[])[idx];
      return fmt(v);
    }
    for (let i = d.shown.length - 1; i >= 0; i--) if (d.shown[i] !== null && d.shown[i] !== undefined) return `last ${fmt(d.shown[i])}`;
    return "no value";
  };

  const paintLegend = (idx?: number | null): void => {
    legend.querySelectorAll<HTMLElement>(".value").forEach((el, i) => {
      if (drawn[i]) el.textContent = valueAt(drawn[i], idx);
    });
  };

  const applyHighlight = (): void => {
    if (!plot) return;
    let changed = false;
    for (const d of drawn) {
      const alpha = highlight === null || highlight === d.run.key ? 1 : 0.2;
      for (let i = d.first; i < d.first + d.count; i++) {
        changed ||= (plot.series[i].alpha ?? 1) !== alpha;
        plot.series[i].alpha = alpha;
      }
    }
    box.dataset.highlight = highlight ?? "";
    legend.querySelectorAll("button").forEach((b) => b.classList.toggle("highlight", b.dataset.key === highlight));
    if (changed) plot.redraw(false); // only when a run's emphasis changed (a redraw costs a draw)
  };

  const toggle = (key: string): void => {
    if (hidden.has(key)) hidden.delete(key);
    else hidden.add(key);
    const d = drawn.find((x) => x.run.key === key);
    if (plot && d) for (let i = d.first; i < d.first + d.count; i++) plot.setSeries(i, { show: !hidden.has(key) });
    legend.querySelector<HTMLElement>(`button[data-key="${CSS.escape(key)}"]`)?.setAttribute("aria-pressed", String(!hidden.has(key)));
    box.dataset.hidden = [...hidden].join("\n");
  };

  let legendKey = "";
  const buildLegend = (): void => {
    const now = drawn.map((d) => `${d.run.key}|${d.run.label}|${d.colour}|${d.dashed}`).join("\n");
    if (now === legendKey) return paintLegend(null); // the same runs: keep the buttons (and focus)
    legendKey = now;
    legend.replaceChildren(
      ...drawn.map((d) => {
        const swatch = h("span", { class: `swatch${d.dashed ? " dashed" : ""}`, "aria-hidden": "true" });
        swatch.style.borderTopColor = d.colour;
        const b = h("button", { type: "button", "aria-pressed": String(!hidden.has(d.run.key)), "data-key": d.run.key, title: "Click to hide or show; hover or focus to highlight" }, swatch, h("span", { class: "label" }, d.run.label), h("span", { class: "value" }, valueAt(d, null)));
        b.addEventListener("click", () => toggle(d.run.key));
        const on = (): void => {
          highlight = d.run.key;
          applyHighlight();
        };
        const off = (): void => {
          if (highlight !== d.run.key) return;
          highlight = null;
          applyHighlight();
        };
        b.addEventListener("mouseenter", on);
        b.addEventListener("focus", on);
        b.addEventListener("mouseleave", off);
        b.addEventListener("blur", off);
        return h("li", {}, b);
      }),
    );
  };

  const draw = (): void => {
    started = performance.now();
    const s: Settings = store.value;
    const palette = Array.from({ length: 12 }, (_, i) => css(`--series-${i}`) || css("--accent"));
    let dropped = 0;
    const marks = { NaN: 0, "+inf": 0, "-inf": 0 };
    const smooth = s.smoothing > 0;
    const per = (smooth ? 2 : 1) + (s.bands ? 2 : 0);
    const xs: number[][] = [];
    const ys: (number | null)[][][] = [];
    drawn = runs.map((run, n) => {
      const cols = columns(run, s.xMode);
      for (const m of cols.marks) marks[m.kind]++;
      let raw = cols.mean;
      let sm = smooth ? ema(cols.mean, s.smoothing) : raw;
      let lo = cols.min;
      let hi = cols.max;
      if (s.logY) {
        const r = forLog(raw);
        dropped += r.dropped;
        raw = r.values;
        sm = smooth ? forLog(sm).values : raw;
        lo = forLog(lo).values;
        hi = forLog(hi).values;
      }
      xs.push(cols.x);
      ys.push([...(smooth ? [sm, raw] : [raw]), ...(s.bands ? [hi, lo] : [])]);
      const { colour, dashed } = style(run.colour ?? n);
      return { run, cols, shown: sm, first: 1 + n * per, count: per, colour: palette[colour], dashed };
    });
    const aligned = align(xs, ys);
    const data: uPlot.AlignedData = [aligned.x, ...aligned.ys.flat()];
    drawn.forEach((d, n) => (d.shown = aligned.ys[n][0]));

    // What a test (or a curious user) can read without the canvas.
    box.dataset.points = String(drawn.reduce((t, d) => t + d.cols.mean.filter((v) => v !== null).length, 0));
    box.dataset.lastStep = String(Math.max(-1, ...runs.flatMap((r) => r.points.map((p) => p.last_step))));
    box.dataset.attempts = String(runs.length);
    box.dataset.lines = runs.map((r) => r.label).join("\n");
    box.dataset.nonfinite = `${marks.NaN} NaN, ${marks["+inf"]} +inf, ${marks["-inf"]} -inf`;
    box.dataset.dropped = String(dropped);
    box.dataset.zoom = zoom ? `${zoom[0]},${zoom[1]}` : "";
    box.dataset.x = s.xMode;
    const words: string[] = [];
    if (!runs.length) words.push("No points yet.");
    const bad = [marks.NaN ? `${marks.NaN} NaN (×)` : "", marks["+inf"] ? `${marks["+inf"]} +∞ (▲)` : "", marks["-inf"] ? `${marks["-inf"]} −∞ (▼)` : ""].filter(Boolean);
    if (bad.length) words.push(`Not finite, marked on the curve: ${bad.join(", ")}.`);
    if (dropped) words.push(`${dropped} point${dropped === 1 ? "" : "s"} at or below zero not drawn on the log scale.`);
    if (zoom) words.push("Zoomed: double-click, Escape or Reset zoom shows the whole series.");
    note.textContent = words.join(" ");
    reset.disabled = !zoom;

    const key = [s.xMode, s.logY, s.bands, smooth, ...drawn.map((d) => d.run.key)].join("|");
    if (plot && key === layout) {
      plot.setData(data, true);
      if (zoom) plot.setScale("x", { min: zoom[0], max: zoom[1] });
      buildLegend();
      applyHighlight();
      return;
    }
    plot?.destroy();
    layout = key;
    const series: uPlot.Series[] = [{ label: X_MODES.find(([m]) => m === s.xMode)![1] }];
    const bands: uPlot.Band[] = [];
    for (const d of drawn) {
      const show = !hidden.has(d.run.key);
      const dash = d.dashed ? [6, 4] : undefined;
      if (smooth) series.push({ label: d.run.label, stroke: d.colour, width: 1.75, dash, show, spanGaps: false, points: { show: false } });
      series.push({ label: smooth ? `${d.run.label} (raw)` : d.run.label, stroke: smooth ? withAlpha(d.colour, 0.3) : d.colour, width: smooth ? 1 : 1.5, dash, show, spanGaps: false, points: { show: false } });
      if (s.bands) {
        const i = series.length;
        series.push({ label: `${d.run.label} max`, stroke: "transparent", width: 0, show, points: { show: false } });
        series.push({ label: `${d.run.label} min`, stroke: "transparent", width: 0, show, points: { show: false } });
        bands.push({ series: [i, i + 1], fill: withAlpha(d.colour, 0.12) });
      }
    }
    const fg = css("--fg");
    const grid = { stroke: css("--border"), width: 1 };
    const xAxis: uPlot.Axis = { label: X_MODES.find(([m]) => m === s.xMode)![1], stroke: fg, grid, ticks: grid };
    if (s.xMode === "step")
      xAxis.splits = (_u, _i, min, max) => {
        const ticks = stepTicks(min, max, Math.max(2, Math.floor((plot?.width ?? plotWidth) / 70)));
        box.dataset.xTicks = ticks.join(","); // the canvas's tick labels, for a test to read
        return ticks;
      };
    plot = new uPlot(
      {
        width: plotWidth,
        height: 260,
        scales: { x: { time: s.xMode === "wall" }, y: s.logY ? { distr: 3, log: 10 } : {} },
        series,
        bands,
        axes: [xAxis, { size: 70, stroke: fg, grid, ticks: grid, values: (_u, splits) => splits.map((v) => fmt(v)) }],
        legend: { show: false },
        cursor: { drag: { x: true, y: false, setScale: false } },
        hooks: {
          setSelect: [
            (u: uPlot) => {
              if (u.select.width < 2 || busy) return;
              const lo = u.posToVal(u.select.left, "x");
              const hi = u.posToVal(u.select.left + u.select.width, "x");
              u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
              void zoomTo([lo, hi]);
            },
          ],
          setCursor: [(u: uPlot) => paintLegend(u.cursor.idx)],
          draw: [
            (u: uPlot) => {
              markNonFinite(u);
              box.dataset.drawMs = (performance.now() - started).toFixed(2);
              box.dataset.draws = String(Number(box.dataset.draws ?? 0) + 1);
            },
          ],
        },
      },
      data,
      target,
    );
    if (zoom) plot.setScale("x", { min: zoom[0], max: zoom[1] });
    buildLegend();
    applyHighlight();
  };

  const markNonFinite = (u: uPlot): void =>
    drawMarks(
      u,
      drawn.filter((d) => !hidden.has(d.run.key)).map((d) => ({ colour: d.colour, faded: highlight !== null && highlight !== d.run.key, marks: d.cols.marks })),
      store.value.logY,
    );

  const zoomTo = async (window: [number, number] | null): Promise<void> => {
    busy = true;
    zoom = window && window[1] > window[0] ? window : null;
    box.dataset.loading = "true";
    try {
      await load();
    } finally {
      busy = false;
      delete box.dataset.loading;
    }
  };

  // What is shown, for the downloads: visible runs, inside the window, on the chosen x axis.
  const rows = (): Row[] => {
    const mode = store.value.xMode;
    const out: Row[] = [];
    for (const d of drawn) {
      if (hidden.has(d.run.key)) continue;
      const smoothed = new Map<number, number | null>();
      const sm = store.value.smoothing > 0 ? ema(d.cols.mean, store.value.smoothing) : d.cols.mean;
      d.cols.x.forEach((x, i) => smoothed.set(x, sm[i]));
      for (const p of d.run.points) {
        const x = xOf(p, mode, d.run.origin);
        if (zoom && (x < zoom[0] || x > zoom[1])) continue;
        const last = num(p.last);
        out.push({ run: d.run.label, job: d.run.job, attempt: d.run.attempt, sub_run: d.run.run, step: p.last_step, wall_time: p.last_wall_time, x, value: p.mean, smoothed: smoothed.get(x) ?? null, min: p.min, max: p.max, last: Number.isFinite(last) ? last : String(p.last), count: p.count });
      }
    }
    return out;
  };
  const save = (text: string, type: string, ext: string): void => {
    const url = URL.createObjectURL(new Blob([text], { type }));
    const a = h("a", { href: url, download: fileName(tag, ext), hidden: true });
    document.body.append(a);
    a.click();
    a.remove();
    window.setTimeout(() => URL.revokeObjectURL(url), 10_000);
  };
  csv.addEventListener("click", () => save(toCSV(rows(), X_MODES.find(([m]) => m === store.value.xMode)![1]), "text/csv", "csv"));
  json.addEventListener("click", () => save(toJSON(tag, store.value.xMode, store.value.smoothing, zoom, rows()), "application/json", "json"));

  // Deferred to the next frame, so resizing never feeds back into the same layout pass.
  let sizing = 0;
  const fit = new ResizeObserver(() => {
    cancelAnimationFrame(sizing);
    sizing = requestAnimationFrame(() => {
      const w = Math.floor(target.clientWidth);
      if (w < 120 || !plot || Math.abs(w - plot.width) < 2) return;
      plotWidth = w;
      plot.setSize({ width: w, height: plot.height });
    });
  });
  fit.observe(target);

  reset.addEventListener("click", () => void zoomTo(null));
  target.addEventListener("dblclick", () => void zoomTo(null));
  target.addEventListener("mouseleave", () => paintLegend(null));
  target.addEventListener("keydown", (e) => {
    if (e.key === "Escape" || e.key === "0") {
      if (zoom) void zoomTo(null);
    } else if ((e.key === "+" || e.key === "=") && plot) {
      const { min, max } = plot.scales.x;
      if (min === undefined || max === undefined) return;
      const q = (max - min) / 4;
      void zoomTo([min + q, max - q]);
    } else return;
    e.preventDefault();
  });
  const unsubscribe = store.subscribe((now, before) => {
    if (now.xMode !== before.xMode) {
      describe();
      zoom = null; // a window in steps means nothing in seconds
      void zoomTo(null);
    } else draw();
  });

  const card: ChartCard = {
    el: box,
    refresh: async () => {
      if (busy) return;
      busy = true;
      try {
        await load();
      } finally {
        busy = false;
      }
    },
    destroy: () => {
      unsubscribe();
      fit.disconnect();
      plot?.destroy();
    },
  };
  return card;
}

// The first load, so a caller can await the card drawn.
export async function loadedChart(tag: string, fetchRuns: Fetch, store: SettingsStore, width: number): Promise<ChartCard> {
  const card = chartCard(tag, fetchRuns, store, width);
  await card.refresh();
  return card;
}
