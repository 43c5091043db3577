// Each attempt: a band on one time axis (how it ended, the backoff before the next), then the
// table (how it ended, the checkpoint it resumed from, when, why).
import type { Schemas } from "../../api";
import { h, table, when } from "../../dom";
import type { Job } from "../jobs";
import { band, duration } from "./band";

type Resume = Schemas["ResumeOut"];

export function attempts(job: Job, now: number): HTMLElement {
  if (!job.attempts.length) return h("p", {}, "No attempt yet.");
  return h(
    "div",
    {},
    attemptBand(job, now),
    table(
      "Attempts",
      ["Attempt", "State", "Ended as", "Resumed from", "Started", "Last change", "Reason"],
      job.attempts.map((a) => [a.number, a.state, a.end || "—", resumed(a.resume), h("time", { datetime: a.created_at }, when(a.created_at)), h("time", { datetime: a.updated_at }, when(a.updated_at)), a.reason ?? ""]),
    ),
  );
}

// One segment per attempt, positioned in percent of the axis; each is focusable and carries
// its facts as its accessible name and tooltip; the gaps between them say the backoff.
function attemptBand(job: Job, now: number): HTMLElement {
  const { segments, start, stop } = band(job.attempts, now, when);
  const track = h("ol", { class: "band-track", "aria-label": "Attempts on a time axis" });
  segments.forEach((s, i) => {
    const seg = h(
      "li",
      { class: `band-segment outcome-${s.outcome}${s.live ? " live" : ""}`, "data-number": String(s.number), tabindex: "0", title: s.words, "aria-label": s.words, "data-outcome": s.outcome },
      h("span", { class: "band-label", "aria-hidden": "true" }, `#${s.number} ${s.outcome}`),
    );
    // Positions go through the CSSOM, which the CSP allows (never an inline style attribute).
    seg.style.left = `${s.left}%`;
    seg.style.width = `${s.width}%`;
    track.append(seg);
    const next = segments[i + 1];
    if (s.gapAfter !== null && next) {
      const gap = h("li", { class: "band-gap", "aria-hidden": "true", title: `backoff ${duration(s.gapAfter)}` }, duration(s.gapAfter));
      gap.style.left = `${s.left + s.width}%`;
      gap.style.width = `${Math.max(next.left - s.left - s.width, 0)}%`;
      track.append(gap);
    }
  });
  return h(
    "figure",
    { class: "band", "data-attempts": String(segments.length) },
    track,
    h("figcaption", { class: "band-axis" }, h("time", { datetime: new Date(start).toISOString() }, when(new Date(start).toISOString())), h("span", {}, `${duration(stop - start)} in all`), h("time", { datetime: new Date(stop).toISOString() }, when(new Date(stop).toISOString()))),
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
