import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { getJson } from "../api";
import { h } from "../dom";

interface Point {
  first_step: number;
  last_step: number;
  mean: number | null;
  min: number | null;
  max: number | null;
}
interface Curve {
  tag: string;
  start: number;
  end: number;
  width: number;
  merged: Point[];
}

const POINTS = 1000;

async function curve(jobId: string, tag: string, range?: [number, number]): Promise<Curve> {
  const q = new URLSearchParams({ tag, points: String(POINTS) });
  if (range) {
    q.set("start", String(Math.max(0, Math.floor(range[0]))));
    q.set("end", String(Math.ceil(range[1])));
  }
  return getJson<Curve>(`/v1/jobs/${encodeURIComponent(jobId)}/metrics/curve?${q.toString()}`);
}

function columns(c: Curve): uPlot.AlignedData {
  return [c.merged.map((p) => p.last_step), c.merged.map((p) => p.mean)];
}

// One metric as an interactive line chart. Drag to zoom: the zoomed step range is fetched again
// at full resolution (at most POINTS buckets), so a long run never ships every point at once.
// Double-click goes back to the whole series.
export async function metricChart(jobId: string, tag: string, width: number): Promise<HTMLElement> {
  const first = await curve(jobId, tag);
  const box = h("figure", { class: "chart" }, h("figcaption", {}, tag));
  const target = h("div", { role: "img", "aria-label": `Line chart of ${tag} by step` });
  box.append(target);
  let busy = false;
  const plot = new uPlot(
    {
      width,
      height: 260,
      scales: { x: { time: false } },
      series: [{ label: "step" }, { label: tag, stroke: "#2563eb", width: 1.5, spanGaps: false }],
      axes: [{ label: "step" }, {}],
      hooks: {
        setSelect: [
          (u: uPlot) => {
            if (u.select.width < 2 || busy) return;
            const lo = u.posToVal(u.select.left, "x");
            const hi = u.posToVal(u.select.left + u.select.width, "x");
            busy = true;
            curve(jobId, tag, [lo, hi])
              .then((c) => u.setData(columns(c)))
              .finally(() => {
                busy = false;
                u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
              });
          },
        ],
      },
      cursor: { drag: { x: true, y: false, setScale: false } },
    },
    columns(first),
    target,
  );
  target.addEventListener("dblclick", () => {
    void curve(jobId, tag).then((c) => plot.setData(columns(c)));
  });
  return box;
}
