import { api, must, type Schemas } from "../api";
import { h, shown, table, view, when } from "../dom";

export type Job = Schemas["JobOut"];
export type Attempt = Schemas["AttemptOut"];

const STATES = ["pending", "starting", "running", "stopping", "succeeded", "failed", "cancelled"] as const;
type State = (typeof STATES)[number];
const isState = (s: string | null): s is State => STATES.some((t) => t === s);
const PAGE = 50;

// The jobs list, filtered and paged by the API (?state=, ?queue=, ?owner=, ?everyone=, ?cursor=).
// Filters and the page's cursor live in the URL hash, so a view (and a page of it) can be shared.
export async function jobsPage(main: HTMLElement, params: URLSearchParams): Promise<void> {
  const asked = params.get("state");
  const state: State | "" = isState(asked) ? asked : "";
  const queue = params.get("queue") ?? "";
  const owner = params.get("owner") ?? "";
  const everyone = params.get("everyone") === "true";
  const cursor = params.get("cursor") ?? "";
  const size = Math.min(200, Math.max(1, Number(params.get("limit")) || PAGE)); // #/jobs?limit=N

  const stateSel = h("select", { id: "f-state", name: "state" }, ...(["", ...STATES] as const).map((s) => h("option", { value: s, selected: s === state }, s || "any")));
  const queueIn = h("input", { id: "f-queue", name: "queue", value: queue });
  const ownerIn = h("input", { id: "f-owner", name: "owner", value: owner });
  const everyoneIn = h("input", { id: "f-everyone", name: "everyone", type: "checkbox", checked: everyone });
  const filters = h(
    "form",
    { class: "filters", role: "search", "aria-label": "Filter jobs" },
    h("label", { for: "f-state" }, "State"), stateSel,
    h("label", { for: "f-queue" }, "Queue"), queueIn,
    h("label", { for: "f-owner" }, "Owner"), ownerIn,
    h("label", { for: "f-everyone" }, everyoneIn, " Everyone's jobs"),
    h("button", { type: "submit" }, "Apply"),
  );
  const filtered = new URLSearchParams();
  if (state) filtered.set("state", state);
  if (queue) filtered.set("queue", queue);
  if (owner) filtered.set("owner", owner);
  if (everyone) filtered.set("everyone", "true");
  if (size !== PAGE) filtered.set("limit", String(size));
  filters.addEventListener("submit", (event) => {
    event.preventDefault();
    const q = new URLSearchParams();
    if (stateSel.value) q.set("state", stateSel.value);
    if (queueIn.value.trim()) q.set("queue", queueIn.value.trim());
    if (ownerIn.value.trim()) q.set("owner", ownerIn.value.trim());
    if (everyoneIn.checked) q.set("everyone", "true");
    if (size !== PAGE) q.set("limit", String(size));
    location.hash = `#/jobs?${q.toString()}`;
  });

  const mine = view(main);
  main.replaceChildren(h("h1", {}, "Jobs"), filters, h("p", { "aria-busy": "true" }, "Loading…"));
  const page = await must(
    api.GET("/v1/jobs", {
      params: { query: { state: state ? [state] : undefined, queue: queue || undefined, owner: owner || undefined, everyone: everyone || undefined, limit: size, cursor: cursor || undefined } },
    }),
  );
  if (!shown(main, mine)) return; // the user moved on meanwhile
  const rows = page.jobs.map((j) => [
    h("a", { href: `#/jobs/${encodeURIComponent(j.id)}` }, j.id),
    h("span", { class: `badge state-${j.state}` }, j.state),
    j.experiment,
    j.method,
    j.owner,
    j.queue,
    j.profile,
    when(j.created_at),
  ]);
  const link = (extra: Record<string, string>): string => {
    const q = new URLSearchParams(filtered);
    for (const [k, v] of Object.entries(extra)) q.set(k, v);
    return `#/jobs?${q.toString()}`;
  };
  const n = page.jobs.length;
  main.replaceChildren(
    h("h1", {}, "Jobs"),
    filters,
    n
      ? table(`${n} job${n === 1 ? "" : "s"}${cursor ? " (a later page)" : ""}, newest first`, ["Job", "State", "Experiment", "Method", "Owner", "Queue", "Profile", "Created"], rows)
      : h("p", {}, cursor ? "No more jobs." : "No jobs match. Submit one with `tp submit` or the Submit page."),
    h(
      "nav",
      { class: "pager", "aria-label": "Pages of jobs" },
      cursor ? h("a", { href: link({}) }, "First page") : "",
      page.next_cursor ? h("a", { href: link({ cursor: page.next_cursor }), rel: "next" }, "Next page") : "",
    ),
  );
}
