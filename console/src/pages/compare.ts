// #/compare?jobs=ID,ID,…: several jobs' metrics overlaid, one chart per tag (the union of the
// jobs' tags, grouped by prefix and searchable), one colour per (job, attempt, sub-run) across
// every chart. At most 20 jobs; one curve request per job per chart drawn; a job that does not
// exist or that the caller may not see is named in an alert and the others are still drawn.
import { api, must, type Schemas } from "../api";
import { type ChartCard, loadedChart } from "../charts/chart";
import { parseJobs, MAX_JOBS } from "../charts/jobs-param";
import { type Run, runsOf } from "../charts/model";
import { SettingsStore, settingsBar } from "../charts/settings";
import { groupTags } from "../charts/tags";
import { alertBox, h, shown, view } from "../dom";
import { jobCurve } from "./chart";
import { REFRESH_MS } from "./job";

type Metrics = Schemas["MetricsOut"];
const ENDED = new Set(["succeeded", "failed", "cancelled"]);
const OPEN_GROUPS = 2; // the first groups start open; the others draw their charts when opened

export async function comparePage(main: HTMLElement, query: URLSearchParams): Promise<void> {
  const mine = view(main);
  const { jobs, dropped } = parseJobs(query.get("jobs"));
  main.replaceChildren(h("h1", {}, "Compare jobs"), h("p", { "aria-busy": "true" }, "Loading…"));
  if (!jobs.length) {
    main.replaceChildren(h("h1", {}, "Compare jobs"), h("p", {}, "No job to compare: open #/compare?jobs=ID,ID (pick jobs in the Jobs list)."));
    return;
  }
  const found = await Promise.allSettled(
    jobs.map(async (id) => {
      const path = { params: { path: { job_id: id } } };
      const [job, metrics] = await Promise.all([must(api.GET("/v1/jobs/{job_id}", path)), must(api.GET("/v1/jobs/{job_id}/metrics", path))]);
      return { id, job, metrics };
    }),
  );
  if (!shown(main, mine)) return;
  const ok: { id: string; state: string; metrics: Metrics }[] = [];
  const problems: string[] = [];
  found.forEach((r, i) => {
    if (r.status === "fulfilled") ok.push({ id: r.value.id, state: r.value.job.state, metrics: r.value.metrics });
    else problems.push(`${jobs[i]}: ${r.reason instanceof Error ? r.reason.message : String(r.reason)}`);
  });
  const store = new SettingsStore();
  const search = h("input", { id: "tag-search", type: "search", placeholder: "e.g. loss", autocomplete: "off" });
  const groupsBox = h("div", { class: "compare-groups" });
  main.replaceChildren(
    h("h1", {}, `Compare ${ok.length} job${ok.length === 1 ? "" : "s"}`),
    dropped ? h("p", { role: "status" }, `At most ${MAX_JOBS} jobs are compared: the first ${MAX_JOBS} are shown, ${dropped} more were asked for and left out.`) : "",
    problems.length ? alertBox(`Not shown: ${problems.join("; ")}`) : "",
    h("p", {}, ...ok.flatMap((j, i) => [i ? ", " : "", h("a", { href: `#/jobs/${encodeURIComponent(j.id)}` }, j.id), ` (${j.state})`])),
    settingsBar(store),
    h("p", { class: "filters" }, h("label", { for: "tag-search" }, "Find tags "), search),
    groupsBox,
  );

  // One colour per (job, attempt, sub-run), the same in every chart.
  const colours = new Map<string, number>();
  const colourOf = (r: Run): number => {
    if (!colours.has(r.key)) colours.set(r.key, colours.size);
    return colours.get(r.key)!;
  };
  const tags = new Set(ok.flatMap((j) => Object.keys(j.metrics.runs)));
  const width = Math.min(1100, Math.max(320, main.clientWidth - 40));
  const cards = new Map<string, ChartCard>();
  const fetchTag = (tag: string) => async (query: (job: string) => Parameters<typeof jobCurve>[2]) => {
    const having = ok.filter((j) => tag in j.metrics.runs);
    const answers = await Promise.all(having.map(async (j) => runsOf(j.id, await jobCurve(j.id, tag, query(j.id)), `${j.id} · `)));
    const runs = answers.flat();
    for (const r of runs) r.colour = colourOf(r);
    return runs;
  };
  const chartOf = (tag: string): HTMLElement => {
    const slot = h("div", { "data-tag": tag }, h("p", { "aria-busy": "true" }, `Loading ${tag}…`));
    loadedChart(tag, fetchTag(tag), store, width)
      .then((card) => {
        cards.set(tag, card);
        slot.replaceChildren(card.el);
      })
      .catch((err: unknown) => slot.replaceChildren(h("p", { class: "muted" }, `${tag}: ${err instanceof Error ? err.message : String(err)}`)));
    return slot;
  };
  const drawGroups = (): void => {
    for (const c of cards.values()) c.destroy();
    cards.clear();
    const groups = groupTags(tags, search.value);
    if (!groups.length) {
      groupsBox.replaceChildren(h("p", {}, tags.size ? "No tag matches." : "None of these jobs has reported a metric yet."));
      return;
    }
    groupsBox.replaceChildren(
      ...groups.map((g, i) => {
        const grid = h("div", { class: "compare-grid" });
        const title = g.group ? `${g.group}/` : "Other";
        const details = h("details", { open: i < OPEN_GROUPS }, h("summary", {}, `${title} (${g.tags.length})`), grid);
        const fill = (): void => {
          if (details.open && !grid.childElementCount) grid.append(...g.tags.map(chartOf));
        };
        details.addEventListener("toggle", fill);
        fill();
        return details;
      }),
    );
  };
  let typing = 0;
  search.addEventListener("input", () => {
    window.clearTimeout(typing);
    typing = window.setTimeout(drawGroups, 250);
  });
  drawGroups();

  // Live: while any job has not ended, every REFRESH_MS the drawn charts fetch again (a zoomed
  // chart its window), not while the tab is hidden.
  if (ok.some((j) => !ENDED.has(j.state))) {
    const tick = async (): Promise<void> => {
      if (!shown(main, mine) || !groupsBox.isConnected) return;
      if (!document.hidden) await Promise.all([...cards.values()].map((c) => c.refresh().catch(() => undefined)));
      window.setTimeout(() => void tick(), REFRESH_MS);
    };
    window.setTimeout(() => void tick(), REFRESH_MS);
  }
}
