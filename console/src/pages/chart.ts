import { api, must } from "../api";
import { loadedChart } from "../charts/chart";
import { runsOf } from "../charts/model";
import { SettingsStore } from "../charts/settings";
import type { CurveQuery } from "../charts/zoom";

export interface Chart {
  el: HTMLElement;
  // Fetch the series again (the zoomed window while zoomed) and redraw: a running job's curve grows.
  refresh(): Promise<void>;
}

// One job's curve of ``tag`` (member 0 of each attempt and sub-run) at most 1,000 buckets each.
export async function jobCurve(jobId: string, tag: string, query: CurveQuery) {
  return must(api.GET("/v1/jobs/{job_id}/metrics/curve", { params: { path: { job_id: jobId }, query: { tag, ...query } } }));
}

// One metric of one job as a chart card (console/src/charts/chart.ts): one line per attempt and
// sub-run. ``settings`` is shared by the page's charts (its toolbar: charts/settings.ts).
export async function metricChart(jobId: string, tag: string, width: number, settings = new SettingsStore()): Promise<Chart> {
  return loadedChart(tag, async (query) => runsOf(jobId, await jobCurve(jobId, tag, query(jobId))), settings, width);
}
