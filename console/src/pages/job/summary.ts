// The job's facts, "why", timeline and members (drawn again by each live refresh).
import type { Schemas } from "../../api";
import { h, table, when } from "../../dom";
import type { Job } from "../jobs";

type Why = Schemas["WhyOut"];
type JobEvent = Schemas["JobEventOut"];
type RetryPolicy = Schemas["RetryOut"];

export function facts(job: Job): HTMLElement {
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

export function whyText(why: Why | null): HTMLElement | string {
  if (!why) return "";
  const where = why.position ? ` (position ${why.position} of ${why.pending_total ?? "?"} waiting)` : "";
  const said = h("p", { class: "why" }, h("strong", {}, why.state === "pending" ? "Why pending: " : "Status: "), why.text, where);
  const notes = why.checkpoints ?? [];
  if (!notes.length) return said;
  return h("div", {}, said, h("ul", { class: "why-checkpoints", "aria-label": "Checkpoints resumed" }, ...notes.map((n) => h("li", {}, n))));
}

// A table named by the heading above it (`labelledBy`), so its name is not printed twice.
export function named(t: HTMLTableElement, labelledBy: string): HTMLTableElement {
  t.caption?.remove();
  t.setAttribute("aria-labelledby", labelledBy);
  return t;
}

// The job's steps; the section's heading ("Timeline", id `labelledBy`) names the table.
export function timeline(list: JobEvent[], labelledBy: string): HTMLElement {
  if (!list.length) return h("p", {}, "No events recorded.");
  return named(
    table(
      "Timeline",
      ["Step", "State", "At", "Reason"],
      list.map((e) => [h("span", { class: `badge state-${e.state ?? "previewed"}` }, e.stage), e.state ?? "—", h("time", { datetime: e.at }, when(e.at)), e.reason]),
    ),
    labelledBy,
  );
}

export function members(job: Job): HTMLElement {
  const rows = job.attempts.flatMap((a) =>
    a.members.map((m) => [a.number, a.state, m.index, m.role, m.state, m.node ?? "—", m.handle ?? "—", m.exit_code ?? "—", m.reason ?? ""]),
  );
  return rows.length ? table("Members by attempt", ["Attempt", "Attempt state", "Member", "Role", "State", "Node", "Handle", "Exit code", "Reason"], rows) : h("p", {}, "No attempt yet.");
}
