import { api, call, must, type Schemas } from "../api";
import { alertBox, h, shown, table, view, when } from "../dom";
import { SettingsStore, settingsBar } from "../charts/settings";
import { type Chart, metricChart } from "./chart";
import { rawInspector } from "./inspector";
import type { Job } from "./jobs";

type Why = Schemas["WhyOut"];
type JobEvent = Schemas["JobEventOut"];
type Resume = Schemas["ResumeOut"];
type RetryPolicy = Schemas["RetryOut"];

const ENDED = new Set(["succeeded", "failed", "cancelled"]);
const LIVE = new Set(["starting", "running", "stopping"]);
export const REFRESH_MS = 5_000; // facts, timeline and charts of a job not yet ended
let generation = 0; // the latest drawing of a job page; older refresh loops stop

const path = (job_id: string) => ({ params: { path: { job_id } } });
const events = (id: string) => must(api.GET("/v1/jobs/{job_id}/events", path(id)));

function facts(job: Job): HTMLElement {
  const dl = h("dl", { class: "facts" });
  const fact = (k: string, v: string | number | null): void => {
    dl.append(h("dt", {}, k), h("dd", {}, v === null || v === "" ? "—" : String(v)));
  };
  fact("State", job.state);
  fact("Owner", job.owner);
  fact("Experiment", job.experiment);
  fact("Method", job.method);
  fact("Queue", job.queue);
  fact("Profile", job.profile);
  fact("Backend", job.backend);
  fact("Created", when(job.created_at));
  fact("Updated", when(job.updated_at));
  fact("Reason", job.reason);
  fact("Exit code", job.exit_code);
  fact("Retry", retryWords(job.retry));
  if (job.next_attempt_at) fact("Next attempt", `not before ${when(job.next_attempt_at)}`);
  return dl;
}

// The retry policy in words, as `tp job status` says it (docs/lifecycles.md#retries).
function retryWords(p: RetryPolicy | null): string {
  if (!p || p.max_attempts <= 1) return "no retry (1 attempt)";
  const codes = p.exit_codes.length ? ` (exit codes ${p.exit_codes.join(", ")})` : "";
  return `${p.max_attempts} attempts, a new one after ${p.on.join(", ")}${codes}; backoff ${p.backoff_seconds} s doubling to ${p.max_backoff_seconds} s`;
}

// Each attempt: how it ended (why, in words) and when, and the checkpoint it resumed from;
// the next one's time is in the facts.
function attempts(job: Job): HTMLElement {
  if (!job.attempts.length) return h("p", {}, "No attempt yet.");
  return table(
    "Attempts",
    ["Attempt", "State", "Ended as", "Resumed from", "Started", "Last change", "Reason"],
    job.attempts.map((a) => [a.number, a.state, a.end || "—", resumed(a.resume), h("time", { datetime: a.created_at }, when(a.created_at)), h("time", { datetime: a.updated_at }, when(a.updated_at)), a.reason ?? ""]),
  );
}

// "checkpoint-200 (step 200, attempt 1)", then the newer ones skipped and why.
function resumed(r: Resume | null | undefined): HTMLElement | string {
  if (!r) return "—";
  const origin = [r.step !== null ? `step ${r.step}` : "", r.attempt !== null ? `attempt ${r.attempt}` : ""].filter(Boolean).join(", ");
  const what = r.checkpoint ? `${r.checkpoint}${origin ? ` (${origin})` : ""}` : "the beginning";
  if (!r.skipped.length) return what;
  return h("div", {}, what, h("ul", { class: "skipped" }, ...r.skipped.map((s) => h("li", {}, s))));
}

function whyText(why: Why | null): HTMLElement | string {
  if (!why) return "";
  const where = why.position ? ` (position ${why.position} of ${why.pending_total ?? "?"} waiting)` : "";
  const said = h("p", { class: "why" }, h("strong", {}, why.state === "pending" ? "Why pending: " : "Status: "), why.text, where);
  const notes = why.checkpoints ?? [];
  if (!notes.length) return said;
  return h("div", {}, said, h("ul", { class: "why-checkpoints", "aria-label": "Checkpoints resumed" }, ...notes.map((n) => h("li", {}, n))));
}

function timeline(list: JobEvent[]): HTMLElement {
  if (!list.length) return h("p", {}, "No events recorded.");
  return table(
    "Timeline",
    ["Step", "State", "At", "Reason"],
    list.map((e) => [h("span", { class: `badge state-${e.state ?? "previewed"}` }, e.stage), e.state ?? "—", h("time", { datetime: e.at }, when(e.at)), e.reason]),
  );
}

function members(job: Job): HTMLElement {
  const rows = job.attempts.flatMap((a) =>
    a.members.map((m) => [a.number, a.state, m.index, m.role, m.state, m.node ?? "—", m.handle ?? "—", m.exit_code ?? "—", m.reason ?? ""]),
  );
  return rows.length ? table("Members by attempt", ["Attempt", "Attempt state", "Member", "Role", "State", "Node", "Handle", "Exit code", "Reason"], rows) : h("p", {}, "No attempt yet.");
}

function size(bytes: number): string {
  return bytes < 1024 ? `${bytes} B` : bytes < 1024 ** 2 ? `${(bytes / 1024).toFixed(1)} KiB` : `${(bytes / 1024 ** 2).toFixed(1)} MiB`;
}

async function artifacts(id: string): Promise<HTMLElement> {
  const found = await must(api.GET("/v1/jobs/{job_id}/artifacts", path(id)));
  const rows = found.members.flatMap((m) =>
    m.files.map((f) => [m.attempt, m.member, f.path, size(f.size), h("code", { title: f.sha256 }, f.sha256.slice(0, 12)), m.node ? `node ${m.node}` : "control plane"]),
  );
  if (!rows.length) return h("p", {}, "No output files recorded (they are recorded when members complete).");
  return table("Output files", ["Attempt", "Member", "Path", "Size", "SHA-256", "Kept on"], rows);
}

// One job: its facts, timeline, why it waits (or what it holds), attempts and members, the
// recipe's primary metrics as charts (one line per attempt), the raw scalar inspector, its
// output files, the log, and a stop button. While the job has not ended, facts, timeline,
// members and charts refresh every REFRESH_MS; the page draws itself again when it ends.
export async function jobPage(main: HTMLElement, id: string): Promise<void> {
  const mine = ++generation;
  const shownView = view(main);
  const base = `/v1/jobs/${encodeURIComponent(id)}`;
  main.replaceChildren(h("h1", {}, `Job ${id}`), h("p", { "aria-busy": "true" }, "Loading…"));
  const [job, why, history] = await Promise.all([
    must(api.GET("/v1/jobs/{job_id}", path(id))),
    must(api.GET("/v1/jobs/{job_id}/why", path(id))).catch(() => null),
    events(id).catch(() => ({ events: [] as JobEvent[] })),
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
        status.replaceChildren(alertBox(String(err instanceof Error ? err.message : err)));
        stop.disabled = false;
      });
  });
  const factsBox = h("div", {}, facts(job));
  const whyBox = h("div", {}, whyText(why));
  const timelineBox = h("section", { "aria-labelledby": "timeline-title" }, h("h2", { id: "timeline-title" }, "Timeline"), timeline(history.events));
  const membersBox = h("div", {}, attempts(job), members(job));
  const charts = h("section", { "aria-labelledby": "charts-title" }, h("h2", { id: "charts-title" }, "Metrics"));
  const chartNote = h("div", {});
  const chartSettings = new SettingsStore(); // shared by the training and System charts
  charts.append(settingsBar(chartSettings), chartNote);
  // The system group: member 0's GPUs, CPU and memory, beside the training charts (shown once
  // it has a series).
  const systemBox = h(
    "section",
    { "aria-labelledby": "system-title", class: "system" },
    h("h3", { id: "system-title" }, "System"),
    h("p", { class: "muted" }, "Member 0's GPUs (gpu0 is its cuda:0), CPU (cores used) and memory (MiB), sampled by its node; the step counts samples."),
  );
  const inspectorBox = h("div", {});
  const artifactsBox = h("section", { "aria-labelledby": "artifacts-title" }, h("h2", { id: "artifacts-title" }, "Artifacts"), h("p", { "aria-busy": "true" }, "Loading…"));
  const logs = h("pre", { class: "logs", role: "log", tabindex: "0", "aria-label": "Job log" }, "Loading…");
  // Every member's log is kept (docs/lifecycles.md): a picker when the attempt has several.
  let chosen = 0;
  let repick = false; // a stream aborted for another member, not because the user left
  let stream: AbortController | null = null;
  const logPath = (follow: boolean): string => `${base}/logs?member=${chosen}${follow ? "&follow=true" : ""}`;
  const readEnded = async (): Promise<void> => {
    stream?.abort();
    const abort = (stream = new AbortController());
    try {
      const text = await (await call(logPath(false), { signal: abort.signal })).text();
      logs.textContent = text || "(empty)";
    } catch (err) {
      if (!abort.signal.aborted) throw err; // else another member was picked meanwhile
    }
  };
  const picker = memberPicker(job, (index) => {
    chosen = index;
    logs.textContent = "Loading…";
    if (LIVE.has(job.state)) {
      repick = true;
      stream?.abort(); // the follow loop below opens the chosen member's stream
    } else void readEnded().catch((err: unknown) => logs.append(`\nLog unavailable: ${err instanceof Error ? err.message : String(err)}`));
  });
  main.replaceChildren(
    h("h1", {}, `Job ${id}`),
    h("p", {}, h("a", { href: "#/jobs" }, "← All jobs")),
    factsBox,
    whyBox,
    stop,
    status,
    timelineBox,
    h("h2", {}, "Attempts and members"),
    membersBox,
    charts,
    inspectorBox,
    artifactsBox,
    h("h2", {}, "Log"),
    picker,
    logs,
  );
  const current = (): boolean => mine === generation && logs.isConnected;

  // Charts: the canonical tags (the recipe's primary metrics reported, else every tag).
  const width = Math.min(900, Math.max(320, main.clientWidth - 40));
  const drawn = new Map<string, Chart>();
  let inspected = 0; // 0: not built; -1: built without series; else the number of series
  const drawCharts = async (): Promise<void> => {
    const metrics = await must(api.GET("/v1/jobs/{job_id}/metrics", path(id))).catch(() => null);
    const tags = metrics?.canonical ?? [];
    chartNote.replaceChildren(
      tags.length ? "" : h("p", {}, metrics?.primary.length ? `No metrics reported yet (this recipe charts ${metrics.primary.join(", ")}).` : "No metrics reported yet."),
    );
    const system = metrics?.system ?? [];
    if (system.length && !systemBox.isConnected) charts.after(systemBox);
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
        if (!chart) box.append(h("p", { class: "muted" }, `${tag}: ${err instanceof Error ? err.message : String(err)}`));
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
  void artifacts(id)
    .then((el) => artifactsBox.replaceChildren(artifactsBox.firstElementChild!, el))
    .catch((err: unknown) => artifactsBox.replaceChildren(artifactsBox.firstElementChild!, h("p", { class: "muted" }, `Artifacts unavailable: ${err instanceof Error ? err.message : String(err)}`)));

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
        timelineBox.replaceChildren(timelineBox.firstElementChild!, timeline(historyNow.events));
        membersBox.replaceChildren(attempts(now), members(now));
        await drawCharts();
      }
      window.setTimeout(() => void tick().catch(() => window.setTimeout(() => void tick(), REFRESH_MS)), REFRESH_MS);
    };
    window.setTimeout(() => void tick().catch(() => undefined), REFRESH_MS);
  }
  try {
    if (LIVE.has(job.state)) {
      for (;;) {
        repick = false;
        stream = new AbortController();
        if (await follow(logPath(true), logs, stream)) break;
        if (!repick || !current()) return; // the user left the page
      }
      // The stream ends when the job's processes do; the job's final state is recorded just
      // after. Draw the page again once it has ended (never while it has not, so a stream that
      // ends early cannot loop); give up after a minute and say so.
      for (let i = 0; i < 60 && current(); i++) {
        if (ENDED.has((await must(api.GET("/v1/jobs/{job_id}", path(id)))).state)) return jobPage(main, id);
        await new Promise((resolve) => window.setTimeout(resolve, 1000));
      }
      if (current()) logs.append("\n(the job has not ended yet; reload for its state)");
    }
    else await readEnded();
  } catch (err) {
    if (!(err instanceof DOMException && err.name === "AbortError"))
      logs.append(`\nLog unavailable: ${err instanceof Error ? err.message : String(err)}`);
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
async function follow(path: string, logs: HTMLElement, abort: AbortController): Promise<boolean> {
  const leave = (): void => abort.abort();
  window.addEventListener("hashchange", leave, { once: true });
  try {
    const res = await call(path, { signal: abort.signal });
    logs.textContent = "";
    logs.setAttribute("aria-busy", "true");
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (!logs.isConnected) {
        abort.abort(); // the page was redrawn (e.g. after Stop): this stream has no reader left
        return false;
      }
      const atBottom = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 4;
      logs.append(value);
      if (atBottom) logs.scrollTop = logs.scrollHeight;
    }
    logs.append("\n— end of log —");
    return true;
  } catch (err) {
    if (abort.signal.aborted) return false;
    throw err;
  } finally {
    window.removeEventListener("hashchange", leave);
    logs.removeAttribute("aria-busy");
  }
}
