import { getJson } from "../api";
import { h, table, when } from "../dom";

export interface Member {
  id: string;
  index: number;
  state: string;
  handle: string | null;
  exit_code: number | null;
  reason: string | null;
  node: string | null;
  role: string;
}
export interface Attempt {
  id: string;
  number: number;
  state: string;
  reason: string | null;
  exit_code: number | null;
  members: Member[];
}
export interface Job {
  id: string;
  state: string;
  owner: string;
  experiment: string;
  method: string;
  profile: string;
  backend: string;
  queue: string;
  created_at: string;
  updated_at: string;
  reason: string | null;
  exit_code: number | null;
  attempts: Attempt[];
}

const STATES = ["", "pending", "starting", "running", "stopping", "succeeded", "failed", "cancelled"];

// The jobs list. State is filtered by the API (?state=); queue and owner filter the fetched page
// here (the API has no such parameters yet). Filters live in the URL hash so a view can be shared.
export async function jobsPage(main: HTMLElement, params: URLSearchParams): Promise<void> {
  const state = params.get("state") ?? "";
  const queue = params.get("queue") ?? "";
  const owner = params.get("owner") ?? "";
  const everyone = params.get("everyone") === "true";

  const stateSel = h("select", { id: "f-state", name: "state" }, ...STATES.map((s) => h("option", { value: s, selected: s === state }, s || "any")));
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
  filters.addEventListener("submit", (event) => {
    event.preventDefault();
    const q = new URLSearchParams();
    if (stateSel.value) q.set("state", stateSel.value);
    if (queueIn.value.trim()) q.set("queue", queueIn.value.trim());
    if (ownerIn.value.trim()) q.set("owner", ownerIn.value.trim());
    if (everyoneIn.checked) q.set("everyone", "true");
    location.hash = `#/jobs?${q.toString()}`;
  });

  main.replaceChildren(h("h1", {}, "Jobs"), filters, h("p", { "aria-busy": "true" }, "Loading…"));
  const api = new URLSearchParams({ limit: "200" });
  if (state) api.append("state", state);
  if (everyone || owner) api.set("everyone", "true");
  const page = await getJson<{ jobs: Job[]; next_cursor: string | null }>(`/v1/jobs?${api.toString()}`);
  const jobs = page.jobs.filter((j) => (!queue || j.queue === queue) && (!owner || j.owner === owner));
  const rows = jobs.map((j) => [
    h("a", { href: `#/jobs/${encodeURIComponent(j.id)}` }, j.id),
    h("span", { class: `badge state-${j.state}` }, j.state),
    j.experiment,
    j.method,
    j.owner,
    j.queue,
    j.profile,
    when(j.created_at),
  ]);
  main.replaceChildren(
    h("h1", {}, "Jobs"),
    filters,
    jobs.length
      ? table(`${jobs.length} job${jobs.length === 1 ? "" : "s"}, newest first`, ["Job", "State", "Experiment", "Method", "Owner", "Queue", "Profile", "Created"], rows)
      : h("p", {}, "No jobs match. Submit one with `tp submit` or the Submit page."),
    page.next_cursor ? h("p", { class: "muted" }, "Showing the newest 200.") : "",
  );
}
