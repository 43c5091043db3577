import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { api, must, type Schemas } from "../api";
import { h } from "../dom";

type AttemptCurve = Schemas["AttemptCurveOut"];
type Curve = Schemas["CurveOut"];

export interface Chart {
  el: HTMLElement;
  // Fetch the series again (unless the user has zoomed in) and redraw: a running job's curve grows.
  refresh(): Promise<void>;
}

const POINTS = 1000;
// One colour per attempt, in order (enough contrast on white for WCAG's 3:1 for graphics).
const COLOURS = ["#2563eb", "#c2410c", "#15803d", "#7e22ce", "#be123c", "#0f766e"];

async function curve(jobId: string, tag: string, range?: [number, number]): Promise<Curve> {
  const query = range ? { tag, points: POINTS, start: Math.max(0, Math.floor(range[0])), end: Math.ceil(range[1]) } : { tag, points: POINTS };
  return must(api.GET("/v1/jobs/{job_id}/metrics/curve", { params: { path: { job_id: jobId }, query } }));
}

// One series per attempt and run (member 0 of each, as the API returns them), joined on the
// step axis. A bucket whose values are all NaN or infinite has a null mean: a gap in its line.
function columns(c: Curve): uPlot.AlignedData {
  const tables: uPlot.AlignedData[] = c.attempts.map((a) => [a.points.map((p) => p.last_step), a.points.map((p) => p.mean)]);
  if (!tables.length) return [[], []];
  return tables.length === 1 ? tables[0] : uPlot.join(tables);
}

const label = (a: AttemptCurve): string => `attempt ${a.attempt}` + (a.run ? ` · ${a.run}` : "");
const labels = (c: Curve): string[] => (c.attempts.length ? c.attempts.map(label) : ["no points yet"]);

// One metric as an interactive line chart, one line per attempt (and sub-run) with a legend. Drag to zoom:
// the zoomed step range is fetched again at full resolution (at most POINTS buckets per attempt),
// so a long run never ships every point at once. Double-click goes back to the whole series.
export async function metricChart(jobId: string, tag: string, width: number): Promise<Chart> {
  let shown = await curve(jobId, tag);
  const box = h("figure", { class: "chart" }, h("figcaption", {}, tag));
  const target = h("div", { role: "img", "aria-label": `Line chart of ${tag} by step` });
  box.append(target);
  let busy = false;
  let zoomed: [number, number] | null = null;
  let plot: uPlot | null = null;
  let drawn = "";

  const draw = (c: Curve): void => {
    shown = c;
    const data = columns(c);
    // What a test (or a curious user) can read without the canvas: points drawn, last step.
    const points = data.slice(1).reduce((n, ys) => n + Array.from(ys as ArrayLike<number | null | undefined>).filter((y) => y !== null && y !== undefined).length, 0);
    box.dataset.points = String(points);
    box.dataset.lastStep = String(Math.max(-1, ...c.attempts.flatMap((a) => a.points.map((p) => p.last_step))));
    box.dataset.attempts = String(c.attempts.length);
    const names = labels(c);
    box.dataset.lines = names.join("\n"); // "attempt 1 · loss_train", one per line drawn
    if (plot && names.join("\n") === drawn) {
      plot.setData(data);
      return;
    }
    plot?.destroy();
    drawn = names.join("\n");
    plot = new uPlot(
      {
        width,
        height: 260,
        scales: { x: { time: false } },
        series: [{ label: "step" }, ...names.map((label, i) => ({ label, stroke: COLOURS[i % COLOURS.length], width: 1.5, spanGaps: false }))],
        axes: [{ label: "step" }, { size: 70 }],
        legend: { show: true },
        hooks: {
          setSelect: [
            (u: uPlot) => {
              if (u.select.width < 2 || busy) return;
              const lo = u.posToVal(u.select.left, "x");
              const hi = u.posToVal(u.select.left + u.select.width, "x");
              busy = true;
              zoomed = [lo, hi];
              curve(jobId, tag, [lo, hi])
                .then((z) => draw(z))
                .finally(() => {
                  busy = false;
                  plot?.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
                });
            },
          ],
        },
        cursor: { drag: { x: true, y: false, setScale: false } },
      },
      data,
      target,
    );
  };
  draw(shown);
  target.addEventListener("dblclick", () => {
    zoomed = null;
    void curve(jobId, tag).then(draw);
  });
  return {
    el: box,
    refresh: async () => {
      if (zoomed || busy) return;
      draw(await curve(jobId, tag));
    },
  };
}
