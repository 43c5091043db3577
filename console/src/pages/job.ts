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
    a.members.map((m) => [a.number, a.state, m.index, m.state, m.handle ?? "—", m.exit_code ?? "—", m.reason ?? ""]),
  );
  const charts = h("section", { "aria-labelledby": "charts-title" }, h("h2", { id: "charts-title" }, "Metrics"));
  const logs = h("pre", { class: "logs", tabindex: "0", "aria-label": "Job log" }, "Loading…");
  main.replaceChildren(
    h("h1", {}, `Job ${id}`),
    h("p", {}, h("a", { href: "#/jobs" }, "← All jobs")),
    facts,
    why ? h("p", { class: "why" }, h("strong", {}, why.kind === "pending" ? "Why pending: " : "Status: "), why.text) : "",
    stop,
    status,
    h("h2", {}, "Attempts and members"),
    members.length ? table("Members by attempt", ["Attempt", "Attempt state", "Member", "State", "Handle", "Exit code", "Reason"], members) : h("p", {}, "No attempt yet."),
    charts,
    h("h2", {}, "Log"),
    logs,
  );

  const metrics = await getJson<Metrics>(`${base}/metrics`).catch(() => null);
  const tags = metrics ? (metrics.primary.length ? metrics.primary : metrics.canonical) : [];
  if (!tags.length) charts.append(h("p", {}, "No metrics reported yet."));
  const width = Math.min(900, Math.max(320, main.clientWidth - 40));
  for (const tag of tags) {
    try {
      charts.append(await metricChart(id, tag, width));
    } catch (err) {
      charts.append(h("p", { class: "muted" }, `${tag}: ${err instanceof Error ? err.message : String(err)}`));
    }
  }
  try {
    const res = await call(`${base}/logs`);
    logs.textContent = (await res.text()) || "(empty)";
  } catch (err) {
    logs.textContent = `Log unavailable: ${err instanceof Error ? err.message : String(err)}`;
  }
}
