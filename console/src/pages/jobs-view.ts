// The jobs list's pure parts (no DOM, unit-tested in console/test/jobs-view.test.ts): each row's
// duration and resources, and the selection the "Compare selected" link is made of.
import type { Schemas } from "../api";

type Job = Schemas["JobOut"];

export const COMPARE_MAX = 20; // jobs the compare view takes at once

// "4 s", "12 min 5 s", "3 h 2 min", "2 d 4 h": two units at most, never negative.
export function formatDuration(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  const units: [number, string][] = [
    [Math.floor(s / 86400), "d"],
    [Math.floor((s % 86400) / 3600), "h"],
    [Math.floor((s % 3600) / 60), "min"],
    [s % 60, "s"],
  ];
  const first = units.findIndex(([n]) => n > 0);
  if (first < 0) return "0 s";
  return units
    .slice(first, first + 2)
    .filter(([n], i) => i === 0 || n > 0)
    .map(([n, u]) => `${n} ${u}`)
    .join(" ");
}

export interface Duration {
  text: string; // "running 12 min 5 s", "ran 3 h 2 min", "waiting 4 s"
  since: string | null; // an ISO time the text counts from while it still grows (live), else null
  label: string; // the words of `text` for a screen reader, with the times
}

const ms = (iso: string): number => new Date(iso).getTime();

// Running (starting, stopping): since its first start, live. Ended: its first start to its
// end ("never ran" when it did not). Pending: waiting since it last entered pending, live.
export function duration(job: Job, now: number): Duration {
  const p = job.progress;
  if (!p) return { text: "", since: null, label: "" };
  if (p.ended_at) {
    if (!p.started_at) return { text: "never ran", since: null, label: "never ran" };
    const text = `ran ${formatDuration(ms(p.ended_at) - ms(p.started_at))}`;
    return { text, since: null, label: `${text}, from ${p.started_at} to ${p.ended_at}` };
  }
  if (job.state === "pending") {
    const from = p.pending_since ?? job.updated_at;
    const text = `waiting ${formatDuration(now - ms(from))}`;
    return { text, since: from, label: `${text}, since ${from}` };
  }
  if (p.started_at) {
    const text = `running ${formatDuration(now - ms(p.started_at))}`;
    return { text, since: p.started_at, label: `${text}, since ${p.started_at}` };
  }
  return { text: job.state, since: null, label: job.state }; // starting: not yet running
}

// The recomputed text of a live duration cell (data-since, data-verb) at `now`.
export const liveText = (verb: string, since: string, now: number): string => `${verb} ${formatDuration(now - ms(since))}`;

const num = (n: number): string => (Number.isInteger(n) ? String(n) : n.toFixed(1));

// "8 GPUs", "1 GPU", or for a CPU job "2 CPUs".
export function resources(job: Job): string {
  if (job.gpus > 0) return `${job.gpus} GPU${job.gpus === 1 ? "" : "s"}`;
  return `${num(job.cpus)} CPU${job.cpus === 1 ? "" : "s"}`;
}

// "3 of 12" for a pending job with a queue position; "" otherwise.
export function position(job: Job, total: number | null | undefined): string {
  const n = job.progress?.queue_position;
  if (n === null || n === undefined) return "";
  return total ? `${n} of ${total}` : String(n);
}

// The selection, in the order the jobs were picked, without repeats, at most COMPARE_MAX.
export function parseSelection(raw: string | null): string[] {
  if (!raw) return [];
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    return [];
  }
  if (!Array.isArray(value)) return [];
  const ids = value.filter((v): v is string => typeof v === "string" && v.length > 0 && v.length <= 200);
  return [...new Set(ids)].slice(0, COMPARE_MAX);
}

// The selection after a checkbox changed: refused (unchanged) past the limit.
export function toggle(selected: readonly string[], id: string, on: boolean): string[] {
  if (!on) return selected.filter((s) => s !== id);
  if (selected.includes(id) || selected.length >= COMPARE_MAX) return [...selected];
  return [...selected, id];
}

// The compare view's address for these jobs (ids are URL-encoded one by one; commas join them).
export const compareHref = (ids: readonly string[]): string => `#/compare?jobs=${ids.map(encodeURIComponent).join(",")}`;
