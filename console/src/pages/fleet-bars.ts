// The Fleet page's drawn parts: reserved-vs-capacity bars (<meter>, with the values as text
// too), a state badge with the time it last changed, and a node's connectivity history strip
// (role="img" with the segments in words, and the list of changes under a disclosure).
import type { Schemas } from "../api";
import { h, when } from "../dom";
import "./fleet.css";
import { describe, segments, usage } from "./fleet-view";

type Change = Schemas["ConnectivityChangeOut"];

// "GPUs reserved on n1" + a meter + "2 of 8 reserved (25%)".
export function bar(label: string, used: number, total: number): HTMLElement {
  const text = usage(used, total);
  if (total <= 0) return h("span", { class: "muted" }, text);
  return h(
    "span",
    { class: "bar" },
    h("meter", { min: 0, max: total, value: Math.min(used, total), high: total * 0.9, "aria-label": `${label}: ${text}` }),
    h("span", { class: "bar-text" }, text),
  );
}

// A badge (its state) and, under it, when the node entered that state.
export function stateSince(kind: "sched" | "conn", state: string, since: string | null | undefined): HTMLElement {
  return h(
    "span",
    { class: "state-since" },
    h("span", { class: `badge ${kind}-${state}` }, state),
    " ",
    since ? h("time", { class: "since", datetime: since }, `since ${when(since)}`) : h("span", { class: "since muted" }, "since: not recorded"),
  );
}

const clock = (ms: number): string => new Date(ms).toLocaleString();

// The last 24 h as coloured segments, plus the changes themselves as a list.
export function history(node: string, changes: readonly Change[], now: number): HTMLElement {
  const segs = segments(changes, now);
  const strip = h(
    "span",
    { class: "strip", role: "img", "aria-label": `Connectivity of ${node} in the last 24 h: ${describe(segs, clock)}` },
    ...segs.map((s) => {
      const seg = h("span", { class: `seg conn-${s.connectivity}` });
      seg.style.width = `${(s.share * 100).toFixed(2)}%`; // CSSOM: the CSP allows no style attribute
      return seg;
    }),
  );
  const list = h(
    "details",
    {},
    h("summary", {}, `${changes.length} last change${changes.length === 1 ? "" : "s"}`),
    h("ol", { class: "changes" }, ...changes.map((c) => h("li", {}, h("time", { datetime: c.at }, when(c.at)), ` ${c.connectivity}`))),
  );
  list.addEventListener("keydown", (event) => {
    if (event.key !== "Escape" || !list.open) return;
    list.open = false; // Escape closes what Enter opened, and the focus goes back to its summary
    list.querySelector("summary")?.focus();
  });
  return h("span", { class: "history" }, strip, changes.length ? list : h("span", { class: "muted" }, "no changes recorded"));
}
