import { call, getJson, postJson } from "../api";
import { alertBox, h, table, when } from "../dom";
import { metricChart } from "./chart";
import type { Job } from "./jobs";

interface Why {
  state: string;
  kind: string;
  text: string;
  position: number | null;
  pending_total: number | null;
}
interface Metrics {
  primary: string[];
  canonical: string[];
}

const ENDED = new Set(["succeeded", "failed", "cancelled"]);
const LIVE = new Set(["starting", "running", "stopping"]);

// One job: its fields, why it waits (or what it holds), attempts and members, the recipe's
// primary metrics as charts, the log, and a stop button.
export async function jobPage(main: HTMLElement, id: string): Promise<void> {
  const base = `/v1/jobs/${encodeURIComponent(id)}`;
  main.replaceChildren(h("h1", {}, `Job ${id}`), h("p", { "aria-busy": "true" }, "Loading…"));
  const [job, why] = await Promise.all([
    getJson<Job>(base),
    getJson<Why>(`${base}/why`).catch(() => null),
  ]);
  const facts = h("dl", { class: "facts" });
  const fact = (k: string, v: string | number | null): void => {
    facts.append(h("dt", {}, k), h("dd", {}, v === null || v === "" ? "—" : String(v)));
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

  const status = h("div", { "aria-live": "polite" });
  const stop = h("button", { type: "button", disabled: ENDED.has(job.state) }, "Stop job");
  stop.addEventListener("click", () => {
    if (!window.confirm(`Stop job ${id}?`)) return;
    stop.disabled = true;
    postJson<Job>(`${base}/cancel`)
      .then(() => jobPage(main, id))
      .catch((err: unknown) => {
        status.replaceChildren(alertBox(String(err instanceof Error ? err.message : err)));
        stop.disabled = false;
      });
  });

  const members = job.attempts.flatMap((a) =>
    a.members.map((m) => [a.number, a.state, m.index, m.role, m.state, m.node ?? "—", m.handle ?? "—", m.exit_code ?? "—", m.reason ?? ""]),
  );
  const charts = h("section", { "aria-labelledby": "charts-title" }, h("h2", { id: "charts-title" }, "Metrics"));
  const logs = h("pre", { class: "logs", tabindex: "0", "aria-label": "Job log" }, "Loading…");
  main.replaceChildren(
    h("h1", {}, `Job ${id}`),
    h("p", {}, h("a", { href: "#/jobs" }, "← All jobs")),
    facts,
    why ? h("p", { class: "why" }, h("strong", {}, why.state === "pending" ? "Why pending: " : "Status: "), why.text, why.position ? ` (position ${why.position} of ${why.pending_total ?? "?"} waiting)` : "") : "",
    stop,
    status,
    h("h2", {}, "Attempts and members"),
    members.length ? table("Members by attempt", ["Attempt", "Attempt state", "Member", "Role", "State", "Node", "Handle", "Exit code", "Reason"], members) : h("p", {}, "No attempt yet."),
    charts,
    h("h2", {}, "Log"),
    logs,
  );

  const metrics = await getJson<Metrics>(`${base}/metrics`).catch(() => null);
  // canonical: the recipe's primary metrics that were reported, else every reported tag.
  const tags = metrics?.canonical ?? [];
  if (!tags.length)
    charts.append(h("p", {}, metrics?.primary.length ? `No metrics reported yet (this recipe charts ${metrics.primary.join(", ")}).` : "No metrics reported yet."));
  const width = Math.min(900, Math.max(320, main.clientWidth - 40));
  for (const tag of tags) {
    try {
      charts.append(await metricChart(id, tag, width));
    } catch (err) {
      charts.append(h("p", { class: "muted" }, `${tag}: ${err instanceof Error ? err.message : String(err)}`));
    }
  }
  try {
    if (LIVE.has(job.state)) {
      await follow(`${base}/logs?follow=true`, logs);
      // The stream ends when the job's processes do; the job's final state is recorded just
      // after. Draw the page again once it has ended (never while it has not, so a stream that
      // ends early cannot loop); give up after a minute and say so.
      for (let i = 0; i < 60 && logs.isConnected; i++) {
        if (ENDED.has((await getJson<Job>(base)).state)) return jobPage(main, id);
        await new Promise((resolve) => window.setTimeout(resolve, 1000));
      }
      if (logs.isConnected) logs.append("\n(the job has not ended yet; reload for its state)");
    }
    else logs.textContent = (await (await call(`${base}/logs`)).text()) || "(empty)";
  } catch (err) {
    if (!(err instanceof DOMException && err.name === "AbortError"))
      logs.append(`\nLog unavailable: ${err instanceof Error ? err.message : String(err)}`);
  }
}

// A running job's log as it is written (the API streams it until the job ends); leaving the page
// closes the stream.
async function follow(path: string, logs: HTMLElement): Promise<void> {
  const abort = new AbortController();
  window.addEventListener("hashchange", () => abort.abort(), { once: true });
  const res = await call(path, { signal: abort.signal });
  logs.textContent = "";
  logs.setAttribute("aria-busy", "true");
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (!logs.isConnected) {
      abort.abort(); // the page was redrawn (e.g. after Stop): this stream has no reader left
      return;
    }
    const atBottom = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 4;
    logs.append(value);
    if (atBottom) logs.scrollTop = logs.scrollHeight;
  }
  logs.removeAttribute("aria-busy");
  logs.append("\n— end of log —");
}
