import { api, call, must } from "../api";
import { SettingsStore, settingsBar } from "../charts/settings";
import { alertBox, h, shown, view } from "../dom";
import { type Chart, metricChart } from "./chart";
import { rawInspector } from "./inspector";
import { artifacts } from "./job/artifacts";
import { attempts } from "./job/attempts";
import { saveAs } from "./job/download";
import "./job/job.css";
import { logView } from "./job/log";
import { facts, members, timeline, whyText } from "./job/summary";
import type { Job } from "./jobs";

const ENDED = new Set(["succeeded", "failed", "cancelled"]);
const LIVE = new Set(["starting", "running", "stopping"]);
export const REFRESH_MS = 5_000; // facts, timeline and charts of a job not yet ended
const WIDE = 1130; // px of main from which the System group sits beside the training charts
let generation = 0; // the latest drawing of a job page; older refresh loops stop

const path = (job_id: string) => ({ params: { path: { job_id } } });
const events = (id: string) => must(api.GET("/v1/jobs/{job_id}/events", path(id)));
const message = (err: unknown): string => (err instanceof Error ? err.message : String(err));
// the members that completed, whose files are recorded: the artifacts are fetched again when it changes
const completed = (job: Job): string =>
  job.attempts.flatMap((a) => a.members.filter((m) => m.state === "succeeded").map((m) => `${a.number}/${m.index}`)).join(",");

// One job: its facts, timeline, why it waits (or what it holds), attempts (a band on a time
// axis and a table) and members, the recipe's primary metrics as charts (one line per attempt)
// with the System group beside them, the raw scalar inspector, its output files (downloadable),
// the log (searchable, followed while it runs), and a stop button. While the job has not
// ended, facts, timeline, attempts, members, charts and artifacts refresh every REFRESH_MS;
// the page draws itself again when it ends.
export async function jobPage(main: HTMLElement, id: string): Promise<void> {
  const mine = ++generation;
  const shownView = view(main);
  const base = `/v1/jobs/${encodeURIComponent(id)}`;
  main.replaceChildren(h("h1", {}, `Job ${id}`), h("p", { "aria-busy": "true" }, "Loading…"));
  const [job, why, history] = await Promise.all([
    must(api.GET("/v1/jobs/{job_id}", path(id))),
    must(api.GET("/v1/jobs/{job_id}/why", path(id))).catch(() => null),
    events(id).catch(() => ({ events: [] })),
  ]);
  if (!shown(main, shownView)) return; // the user moved on meanwhile
  const status = h("div", { "aria-live": "polite" });
  const stop = h("button", { type: "button", disabled: ENDED.has(job.state) }, "Stop job");
  stop.addEventListener("click", () => {
    if (!window.confirm(`Stop job ${id}?`)) return;
    stop.disabled = true;
    must(api.POST("/v1/jobs/{job_id}/cancel", path(id)))
      .then(() => jobPage(main, id))
      .catch((err: unknown) => {
        status.replaceChildren(alertBox(message(err)));
        stop.disabled = false;
      });
  });
  const factsBox = h("div", {}, facts(job));
  const whyBox = h("div", {}, whyText(why));
  const timelineBox = h("div", {}, timeline(history.events, "timeline-title"));
  const attemptsBox = h("div", {}, attempts(job, Date.now()));
  const membersBox = h("div", {}, members(job));
  const charts = h("section", { "aria-labelledby": "metrics-title charts-title", class: "training" }, h("h3", { id: "charts-title" }, "Training"));
  const chartNote = h("div", {});
  const chartSettings = new SettingsStore(); // shared by the training and System charts
  charts.append(chartNote);
  // The system group: member 0's GPUs, CPU and memory, beside the training charts (shown once
  // it has a series).
  const systemBox = h(
    "section",
    { "aria-labelledby": "system-title", class: "system" },
    h("h3", { id: "system-title" }, "System"),
    h("p", { class: "muted" }, "Member 0's GPUs (gpu0 is its cuda:0), CPU (cores used) and memory (MiB), sampled by its node; the step counts samples."),
  );
  const metricsGrid = h("div", { class: "job-metrics" }, charts);
  const inspectorBox = h("div", {});
  const artifactsBox = h("section", { "aria-labelledby": "artifacts-title" }, h("h2", { id: "artifacts-title" }, "Artifacts"), h("p", { "aria-busy": "true" }, "Loading…"));
  // Every member's log is kept (docs/lifecycles.md): a picker when the attempt has several.
  let chosen = 0;
  let repick = false; // a stream aborted for another member, not because the user left
  let stream: AbortController | null = null;
  const logPath = (follow: boolean): string => `${base}/logs?member=${chosen}${follow ? "&follow=true" : ""}`;
  const log = logView(async () => void (await saveAs(logPath(false), `${id}-member-${chosen}.log`)));
  log.note("Loading…");
  const readEnded = async (): Promise<void> => {
    stream?.abort();
    const abort = (stream = new AbortController());
    try {
      const text = await (await call(logPath(false), { signal: abort.signal })).text();
      log.reset();
      log.append(text);
      log.note(text ? "" : "(empty)");
    } catch (err) {
      if (!abort.signal.aborted) throw err; // else another member was picked meanwhile
    }
  };
  const picker = memberPicker(job, (index) => {
    chosen = index;
    log.reset();
    log.note("Loading…");
    if (LIVE.has(job.state)) {
      repick = true;
      stream?.abort(); // the follow loop below opens the chosen member's stream
    } else void readEnded().catch((err: unknown) => log.note(`Log unavailable: ${message(err)}`));
  });
  main.replaceChildren(
    h("h1", {}, `Job ${id}`),
    h("p", {}, h("a", { href: "#/jobs" }, "← All jobs")),
    factsBox,
    whyBox,
    stop,
    status,
    h("section", { "aria-labelledby": "timeline-title" }, h("h2", { id: "timeline-title" }, "Timeline"), timelineBox),
    h("h2", {}, "Attempts and members"),
    attemptsBox,
    membersBox,
    h("h2", { id: "metrics-title" }, "Metrics"),
    settingsBar(chartSettings), // for the training and System charts alike
    metricsGrid,
    inspectorBox,
    artifactsBox,
    h("section", { "aria-labelledby": "log-title" }, h("h2", { id: "log-title" }, "Log"), picker, log.el),
  );
  const current = (): boolean => mine === generation && log.pre.isConnected;

  // Charts: the canonical tags (the recipe's primary metrics reported, else every tag), with
  // the System group beside them on a wide screen (a CSS grid of two columns).
  const wide = main.clientWidth >= WIDE;
  const width = wide ? Math.floor((main.clientWidth - 40 - 16) / 2) : Math.min(900, Math.max(320, main.clientWidth - 40));
  const drawn = new Map<string, Chart>();
  let inspected = 0; // 0: not built; -1: built without series; else the number of series
  const drawCharts = async (): Promise<void> => {
    const metrics = await must(api.GET("/v1/jobs/{job_id}/metrics", path(id))).catch(() => null);
    const tags = metrics?.canonical ?? [];
    chartNote.replaceChildren(
      tags.length ? "" : h("p", {}, metrics?.primary.length ? `No metrics reported yet (this recipe charts ${metrics.primary.join(", ")}).` : "No metrics reported yet."),
    );
    const system = metrics?.system ?? [];
    if (system.length && !systemBox.isConnected) {
      metricsGrid.append(systemBox);
      metricsGrid.classList.add("with-system");
    }
    for (const [tag, box] of [...tags.map((t) => [t, charts] as const), ...system.map((t) => [t, systemBox] as const)]) {
      const chart = drawn.get(tag);
      try {
        if (chart) await chart.refresh();
        else {
          const made = await metricChart(id, tag, width, chartSettings);
          drawn.set(tag, made);
          box.append(made.el);
        }
      } catch (err) {
        if (!chart) box.append(h("p", { class: "muted" }, `${tag}: ${message(err)}`));
      }
    }
    const series = metrics?.series ?? [];
    // The inspector keeps the user's picks: built once, and again only while it had no series.
    if (!inspected || (inspected < 0 && series.length)) {
      inspectorBox.replaceChildren(rawInspector(id, series));
      inspected = series.length || -1;
    }
  };
  await drawCharts();
  const heading = artifactsBox.firstElementChild!;
  const drawArtifacts = (of: Job): Promise<unknown> =>
    artifacts(of)
      .then((el) => artifactsBox.replaceChildren(heading, el))
      .catch((err: unknown) => artifactsBox.replaceChildren(heading, h("p", { class: "muted" }, `Artifacts unavailable: ${message(err)}`)));
  void drawArtifacts(job);
  let done = completed(job);

  // While it has not ended: poll the job (bounded queries: one job, its events, its curves).
  if (!ENDED.has(job.state)) {
    const tick = async (): Promise<void> => {
      if (!current()) return;
      if (!document.hidden) {
        const [now, whyNow, historyNow] = await Promise.all([must(api.GET("/v1/jobs/{job_id}", path(id))), must(api.GET("/v1/jobs/{job_id}/why", path(id))).catch(() => null), events(id)]);
        if (!current()) return;
        // From pending to anything: draw again (to follow the log). A live job's end is drawn by
        // the log stream's end below.
        if (!LIVE.has(job.state) && now.state !== job.state) return void jobPage(main, id);
        factsBox.replaceChildren(facts(now));
        whyBox.replaceChildren(whyText(whyNow));
        timelineBox.replaceChildren(timeline(historyNow.events, "timeline-title"));
        // keep the keyboard focus on the band's segment the user is on, across the redraw
        const focused = attemptsBox.contains(document.activeElement) ? (document.activeElement as HTMLElement).getAttribute("data-number") : null;
        attemptsBox.replaceChildren(attempts(now, Date.now()));
        if (focused) attemptsBox.querySelector<HTMLElement>(`[data-number="${focused}"]`)?.focus();
        membersBox.replaceChildren(members(now));
        if (completed(now) !== done) {
          done = completed(now); // a member completed: its files are recorded now
          void drawArtifacts(now);
        }
        await drawCharts();
      }
      window.setTimeout(() => void tick().catch(() => window.setTimeout(() => void tick(), REFRESH_MS)), REFRESH_MS);
    };
    window.setTimeout(() => void tick().catch(() => undefined), REFRESH_MS);
  }
  try {
    if (LIVE.has(job.state)) {
      log.following(true);
      for (;;) {
        repick = false;
        stream = new AbortController();
        if (await follow(logPath(true), log, stream)) break;
        if (!repick || !current()) return; // the user left the page
      }
      // The stream ends when the job's processes do; the job's final state is recorded just
      // after. Draw the page again once it has ended (never while it has not, so a stream that
      // ends early cannot loop); give up after a minute and say so.
      for (let i = 0; i < 60 && current(); i++) {
        if (ENDED.has((await must(api.GET("/v1/jobs/{job_id}", path(id)))).state)) return jobPage(main, id);
        await new Promise((resolve) => window.setTimeout(resolve, 1000));
      }
      if (current()) log.note("The job has not ended yet; reload for its state.");
    } else await readEnded();
  } catch (err) {
    if (!(err instanceof DOMException && err.name === "AbortError")) log.note(`Log unavailable: ${message(err)}`);
  }
}

// The member whose log is shown, when the last attempt has more than one ("" otherwise).
function memberPicker(job: Job, pick: (index: number) => void): HTMLElement | string {
  const members = job.attempts[job.attempts.length - 1]?.members ?? [];
  if (members.length < 2) return "";
  const select = h("select", { id: "log-member" }, ...members.map((m) => h("option", { value: String(m.index) }, `member ${m.index}${m.role ? ` (${m.role})` : ""}`)));
  select.addEventListener("change", () => pick(Number(select.value)));
  return h("p", {}, h("label", { for: "log-member" }, "Member "), select);
}

// A running job's log as it is written (the API streams it until the job ends); leaving the page
// or picking another member (``abort``) closes the stream. True when the stream ended by itself.
async function follow(path: string, log: ReturnType<typeof logView>, abort: AbortController): Promise<boolean> {
  const leave = (): void => abort.abort();
  window.addEventListener("hashchange", leave, { once: true });
  try {
    const res = await call(path, { signal: abort.signal });
    log.reset();
    log.pre.setAttribute("aria-busy", "true");
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (!log.pre.isConnected) {
        abort.abort(); // the page was redrawn (e.g. after Stop): this stream has no reader left
        return false;
      }
      log.append(value);
    }
    log.note("— end of log —");
    return true;
  } catch (err) {
    if (abort.signal.aborted) return false;
    throw err;
  } finally {
    window.removeEventListener("hashchange", leave);
    log.pre.removeAttribute("aria-busy");
  }
}
