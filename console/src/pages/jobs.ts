import { api, must, type Schemas } from "../api";
import { alertBox, h, shown, table, view, when } from "../dom";
import "./jobs.css";
import { COMPARE_MAX, compareHref, duration, liveText, parseSelection, position, resources, toggle } from "./jobs-view";

export type Job = Schemas["JobOut"];
export type Attempt = Schemas["AttemptOut"];

const STATES = ["pending", "starting", "running", "stopping", "succeeded", "failed", "cancelled"] as const;
type State = (typeof STATES)[number];
const isState = (s: string | null): s is State => STATES.some((t) => t === s);
const PAGE = 50;
const REFRESH_MS = 10_000; // the list fetches itself again this often while shown
const TICK_MS = 1_000; // live durations move this often (no request)
const SELECTED = "tuneplane.jobs.selected"; // sessionStorage: the jobs picked for comparison
let timers: number[] = [];

const selection = {
  get: (): string[] => parseSelection(sessionStorage.getItem(SELECTED)),
  set: (ids: string[]): void => sessionStorage.setItem(SELECTED, JSON.stringify(ids)),
};

// The jobs list, filtered, searched and paged by the API (?state=, ?queue=, ?owner=, ?everyone=,
// ?q=, ?cursor=). Filters, the search and the page's cursor live in the URL hash, so a view (and a
// page of it) can be shared; the selection lives in sessionStorage (this tab), so it survives
// refreshes, pages and filters. The list fetches itself again every 10 s while shown and the tab
// is visible, redrawing only the table: what is being typed, the focus and the selection stay.
export async function jobsPage(main: HTMLElement, params: URLSearchParams): Promise<void> {
  const asked = params.get("state");
  const state: State | "" = isState(asked) ? asked : "";
  const queue = params.get("queue") ?? "";
  const owner = params.get("owner") ?? "";
  const everyone = params.get("everyone") === "true";
  const search = (params.get("q") ?? "").slice(0, 200);
  const cursor = params.get("cursor") ?? "";
  const size = Math.min(200, Math.max(1, Number(params.get("limit")) || PAGE)); // #/jobs?limit=N

  const stateSel = h("select", { id: "f-state", name: "state" }, ...(["", ...STATES] as const).map((s) => h("option", { value: s, selected: s === state }, s || "any")));
  const searchIn = h("input", { id: "f-q", name: "q", type: "search", value: search, maxlength: 200, "aria-describedby": "f-q-help" });
  const queueIn = h("input", { id: "f-queue", name: "queue", value: queue });
  const ownerIn = h("input", { id: "f-owner", name: "owner", value: owner });
  const everyoneIn = h("input", { id: "f-everyone", name: "everyone", type: "checkbox", checked: everyone });
  const filters = h(
    "form",
    { class: "filters", role: "search", "aria-label": "Filter jobs" },
    h("label", { for: "f-q" }, "Search"), searchIn,
    h("span", { id: "f-q-help", class: "muted" }, "experiment, job id or owner"),
    h("label", { for: "f-state" }, "State"), stateSel,
    h("label", { for: "f-queue" }, "Queue"), queueIn,
    h("label", { for: "f-owner" }, "Owner"), ownerIn,
    h("label", { for: "f-everyone" }, everyoneIn, " Everyone's jobs"),
    h("button", { type: "submit" }, "Apply"),
  );
  const filtered = new URLSearchParams();
  if (search.trim()) filtered.set("q", search.trim());
  if (state) filtered.set("state", state);
  if (queue) filtered.set("queue", queue);
  if (owner) filtered.set("owner", owner);
  if (everyone) filtered.set("everyone", "true");
  if (size !== PAGE) filtered.set("limit", String(size));
  filters.addEventListener("submit", (event) => {
    event.preventDefault();
    const q = new URLSearchParams();
    if (searchIn.value.trim()) q.set("q", searchIn.value.trim());
    if (stateSel.value) q.set("state", stateSel.value);
    if (queueIn.value.trim()) q.set("queue", queueIn.value.trim());
    if (ownerIn.value.trim()) q.set("owner", ownerIn.value.trim());
    if (everyoneIn.checked) q.set("everyone", "true");
    if (size !== PAGE) q.set("limit", String(size));
    location.hash = `#/jobs?${q.toString()}`;
  });

  // The selection bar: how many are picked, the compare link, the limit, and a way to clear.
  const picked = h("div", { class: "selection", id: "selection", "aria-live": "polite" });
  const results = h("div", { id: "jobs-results" });
  const drawSelection = (): void => {
    const ids = selection.get();
    const n = ids.length;
    const clear = h("button", { type: "button", id: "clear-selection" }, "Clear selection");
    clear.addEventListener("click", () => {
      selection.set([]);
      for (const box of results.querySelectorAll<HTMLInputElement>("input.pick")) box.checked = false;
      drawSelection();
    });
    picked.replaceChildren(
      n >= 2
        ? h("a", { href: compareHref(ids), id: "compare-link" }, `Compare selected (${n})`)
        : h("span", { class: "muted" }, `${n} selected: pick 2 to ${COMPARE_MAX} jobs to compare them.`),
      n >= COMPARE_MAX ? h("span", { id: "compare-limit" }, ` ${COMPARE_MAX} is the most the compare view takes: unselect one to pick another.`) : "",
      n ? clear : "",
    );
    for (const box of results.querySelectorAll<HTMLInputElement>("input.pick")) box.disabled = !box.checked && n >= COMPARE_MAX;
  };

  const mine = view(main);
  main.replaceChildren(h("h1", {}, "Jobs"), filters, h("p", { "aria-busy": "true" }, "Loading…"));
  const link = (extra: Record<string, string>): string => {
    const q = new URLSearchParams(filtered);
    for (const [k, v] of Object.entries(extra)) q.set(k, v);
    return `#/jobs?${q.toString()}`;
  };
  const load = async (): Promise<boolean> => {
    const page = await must(
      api.GET("/v1/jobs", {
        params: {
          query: {
            state: state ? [state] : undefined,
            queue: queue || undefined,
            owner: owner || undefined,
            everyone: everyone || undefined,
            q: search.trim() || undefined,
            limit: size,
            cursor: cursor || undefined,
          },
        },
      }),
    );
    if (!shown(main, mine)) return false; // the user moved on meanwhile
    const now = Date.now();
    const chosen = new Set(selection.get());
    const rows = page.jobs.map((j) => {
      const d = duration(j, now);
      const box = h("input", { type: "checkbox", class: "pick", id: `pick-${j.id}`, checked: chosen.has(j.id), "aria-label": `Select job ${j.id} to compare` });
      box.addEventListener("change", () => {
        const next = toggle(selection.get(), j.id, box.checked);
        box.checked = next.includes(j.id);
        selection.set(next);
        drawSelection();
      });
      const verb = d.text.split(" ", 1)[0];
      return [
        box,
        h("a", { href: `#/jobs/${encodeURIComponent(j.id)}`, id: `open-${j.id}` }, j.id),
        h("span", { class: `badge state-${j.state}` }, j.state),
        j.experiment,
        j.owner,
        j.queue,
        resources(j),
        h("span", { class: "duration", "data-since": d.since ?? undefined, "data-verb": d.since ? verb : undefined, title: d.label }, d.text),
        j.progress?.attempts ?? "",
        position(j, page.pending_total),
        when(j.created_at),
      ];
    });
    const n = page.jobs.length;
    // Keep the focus where it was when the table it was in is drawn again.
    const focused = results.contains(document.activeElement) ? document.activeElement?.id : undefined;
    results.replaceChildren(
      n
        ? table(`${n} job${n === 1 ? "" : "s"}${cursor ? " (a later page)" : ""}, newest first`, ["Select", "Job", "State", "Experiment", "Owner", "Queue", "GPUs / CPUs", "Duration", "Attempts", "Queue position", "Created"], rows)
        : h("p", {}, cursor ? "No more jobs." : search ? `No jobs match “${search}”.` : "No jobs match. Submit one with `tp submit` or the Submit page."),
      h(
        "nav",
        { class: "pager", "aria-label": "Pages of jobs" },
        cursor ? h("a", { href: link({}), id: "first-page" }, "First page") : "",
        page.next_cursor ? h("a", { href: link({ cursor: page.next_cursor }), rel: "next", id: "next-page" }, "Next page") : "",
      ),
      h("p", { class: "muted", id: "jobs-updated" }, `Updated ${new Date(now).toLocaleTimeString()}; refreshes every ${REFRESH_MS / 1000} s.`),
    );
    if (focused) document.getElementById(focused)?.focus();
    drawSelection();
    return true;
  };
  if (!(await load())) return;
  main.dataset.page = "jobs";
  main.replaceChildren(h("h1", {}, "Jobs"), filters, picked, results);
  drawSelection();

  // Refetch every 10 s while this view is shown (waits while the tab is hidden); move the live
  // durations every second. A failed refetch leaves the table as it was and says so.
  for (const t of timers) window.clearTimeout(t);
  const alive = (): boolean => shown(main, mine) && main.dataset.page === "jobs";
  const refetch = (): void => {
    if (!alive()) return;
    if (document.hidden) {
      timers[0] = window.setTimeout(refetch, REFRESH_MS);
      return;
    }
    load()
      .catch((err: unknown) => {
        if (alive()) document.getElementById("jobs-updated")?.replaceChildren(alertBox(`Refresh failed: ${err instanceof Error ? err.message : String(err)}`));
      })
      .finally(() => {
        if (alive()) timers[0] = window.setTimeout(refetch, REFRESH_MS);
      });
  };
  const tick = (): void => {
    if (!alive()) return;
    const now = Date.now();
    for (const cell of results.querySelectorAll<HTMLElement>(".duration[data-since]")) cell.textContent = liveText(cell.dataset.verb ?? "", cell.dataset.since ?? "", now);
    timers[1] = window.setTimeout(tick, TICK_MS);
  };
  timers = [window.setTimeout(refetch, REFRESH_MS), window.setTimeout(tick, TICK_MS)];
}
