import { api, must, type Schemas } from "../api";
import { alertBox, h, shown, table, view, when } from "../dom";
import { bar, history, stateSince } from "./fleet-bars";

type FleetNode = Schemas["NodeOut"];
type NodeStatus = Schemas["NodeStatusOut"];
type GpuInventory = Schemas["GpuInventoryOut"];
type GpuDevice = Schemas["GpuDeviceOut"];

const REFRESH_MS = 15_000;
const HISTORY = 10; // connectivity changes per node the page asks for
const OPERATORS = new Set(["admin", "operator"]); // who may cordon, drain and uncordon (the API's rule)
// What each action does, for the confirmation and the button's description.
type Action = "cordon" | "drain" | "uncordon";
const ACTIONS: Record<Action, { verb: string; done: string; means: string }> = {
  cordon: { verb: "Cordon", done: "cordoned", means: "no new work is placed on it; running work stays" },
  drain: { verb: "Drain", done: "draining", means: "no new work is placed on it, and it is to be emptied" },
  uncordon: { verb: "Uncordon", done: "schedulable", means: "it takes new work again" },
};
const NEXT: Record<string, Action[]> = {
  schedulable: ["cordon", "drain"],
  cordoned: ["uncordon", "drain"],
  draining: ["uncordon"],
};
let timer = 0;
const used = (u: number, t: number): string => `${u} / ${t}`;

// A node's detected GPUs in one cell, as `tp fleet ls` writes them: "8× NVIDIA H200 140.4 GiB
// NVLink, driver 580.159.03, CUDA 13.0" (each model of a mixed host; MIG where on).
export function detectedGpus(inv: GpuInventory | null | undefined): string {
  if (!inv || inv.devices.length === 0) return "";
  const groups = new Map<string, GpuDevice[]>();
  for (const d of inv.devices) {
    const key = `${d.name}\u0000${d.memory_mb}`;
    groups.set(key, [...(groups.get(key) ?? []), d]);
  }
  const parts = [...groups.values()].map((ds) => {
    const mig = ds.filter((d) => d.mig).length;
    const flags = [mig === 0 ? "" : mig === ds.length ? "MIG" : `MIG on ${mig}`, ds.some((d) => d.nvlink) ? "NVLink" : ""];
    return [`${ds.length}× ${ds[0].name} ${(ds[0].memory_mb / 1024).toFixed(1)} GiB`, ...flags.filter((f) => f)].join(" ");
  });
  const versions = [inv.driver ? `driver ${inv.driver}` : "", inv.cuda ? `CUDA ${inv.cuda}` : ""].filter((v) => v);
  return [...parts, ...versions].join(", ") + (inv.source === "recorded" ? " (recorded)" : "");
}

// Pools and their nodes: scheduling state and connectivity in separate columns, capacity and
// usage, and each node daemon's last heartbeat.
// Admins and operators get Cordon / Drain / Uncordon / Remove buttons per node, and Remove for a
// pool without nodes, each after a confirmation; the outcome (or the API's refusal, with its
// fix) is announced above the pools.
export async function fleetPage(main: HTMLElement, refresh = false, notice: HTMLElement | null = null): Promise<void> {
  const mine = view(main);
  if (!refresh) main.replaceChildren(h("h1", {}, "Fleet"), h("p", { "aria-busy": "true" }, "Loading…"));
  const [fleet, links, me, changes] = await Promise.all([
    must(api.GET("/v1/fleet")),
    must(api.GET("/v1/node-links")).catch(() => []),
    must(api.GET("/v1/whoami")).catch(() => null),
    must(api.GET("/v1/fleet/connectivity", { params: { query: { per_node: HISTORY } } })).catch(() => []),
  ]);
  const now = Date.now();
  const past = new Map(changes.map((c) => [c.node, c.changes]));
  if (!shown(main, mine)) return; // the user moved on meanwhile
  const operator = me !== null && OPERATORS.has(me.role);
  const status = h("div", { "aria-live": "polite", class: "status" }, notice);
  const act = (node: string, action: Action): void => {
    const a = ACTIONS[action];
    if (!window.confirm(`${a.verb} node ${node}? Then ${a.means}.`)) return;
    must(api.POST(`/v1/nodes/{name}/${action}`, { params: { path: { name: node } } }))
      .then((n) => fleetPage(main, true, h("p", { role: "status" }, `Node ${node} is now ${n.sched}.`)))
      .catch((err: unknown) => status.replaceChildren(alertBox(`${a.verb} ${node} refused: ${err instanceof Error ? err.message : String(err)}`)));
  };
  // Removal: the API decides (a node holding work or whose daemon is connected, a pool with
  // nodes or that a profile alone names, is refused with the fix, shown as for the actions above).
  const remove = (what: "node" | "pool", name: string): void => {
    const means = what === "node" ? "its credentials go with it; a daemon must enroll again" : "its checks and join tokens go with it";
    if (!window.confirm(`Remove ${what} ${name}? Then ${means}.`)) return;
    const path = { params: { path: { name } } };
    const call: Promise<unknown> = what === "node" ? must(api.DELETE("/v1/nodes/{name}", path)) : must(api.DELETE("/v1/pools/{name}", path));
    call
      .then(() => fleetPage(main, true, h("p", { role: "status" }, `${what === "node" ? "Node" : "Pool"} ${name} removed.`)))
      .catch((err: unknown) => status.replaceChildren(alertBox(`Remove ${what} ${name} refused: ${err instanceof Error ? err.message : String(err)}`)));
  };
  const removeButton = (what: "node" | "pool", name: string): HTMLElement => {
    const b = h("button", { type: "button", "aria-label": `Remove ${what} ${name}` }, "Remove");
    b.addEventListener("click", () => remove(what, name));
    return b;
  };
  const buttons = (n: FleetNode): HTMLElement =>
    h(
      "span",
      { class: "actions" },
      ...(NEXT[n.sched] ?? []).map((action) => {
        const b = h("button", { type: "button", "aria-label": `${ACTIONS[action].verb} node ${n.name}` }, ACTIONS[action].verb);
        b.addEventListener("click", () => act(n.name, action));
        return b;
      }),
      removeButton("node", n.name),
    );
  const heartbeat = new Map(links.map((l) => [l.node, l.heartbeat_at]));
  const sections = fleet.pools.map((pool) => {
    const rows = pool.nodes.map((n) => [
      n.name,
      stateSince("sched", n.sched, n.sched_changed_at),
      stateSince("conn", n.connectivity, n.connectivity_changed_at),
      history(n.name, past.get(n.name) ?? [], now),
      n.validation + (n.validation_reason ? ` (${n.validation_reason})` : ""),
      bar(`GPUs reserved on ${n.name}`, n.gpus_used, n.gpus_total),
      bar(`CPUs reserved on ${n.name}`, n.cpus_used, n.cpus_total),
      bar(`Memory MB reserved on ${n.name}`, n.memory_mb_used, n.memory_mb_total),
      detectedGpus(n.gpu_inventory),
      n.members,
      when(heartbeat.get(n.name)),
      ...(operator ? [buttons(n)] : []),
    ]);
    const summary = `${pool.backend}${pool.gpu_model ? `, ${pool.gpu_model}` : ""}; GPUs used ${used(pool.gpus_used, pool.gpus_total)}`;
    const sum = (f: (n: NodeStatus) => number): number => pool.nodes.reduce((a, n) => a + f(n), 0);
    const totals = h(
      "div",
      { class: "pool-bars" },
      ...(
        [
          ["GPUs", pool.gpus_used, pool.gpus_total],
          ["CPUs", sum((n) => n.cpus_used), sum((n) => n.cpus_total)],
          ["Memory MB", sum((n) => n.memory_mb_used), sum((n) => n.memory_mb_total)],
        ] as const
      ).map(([what, u, t]) => h("div", {}, h("span", { class: "bar-label" }, what), bar(`${what} reserved in pool ${pool.name}`, u, t))),
    );
    return h(
      "section",
      { "aria-labelledby": `pool-${pool.name}` },
      h("h2", { id: `pool-${pool.name}` }, `Pool ${pool.name}`, h("span", { class: "muted" }, ` (fleet ${pool.fleet})`)),
      h("p", {}, summary, pool.description ? ` — ${pool.description}` : ""),
      pool.nodes.length ? totals : "",
      pool.unavailable ? h("p", { class: "error", id: `pool-${pool.name}-unavailable` }, `Takes no new work: ${pool.unavailable}`) : "",
      pool.nodes.length
        ? h(
            "div",
            { class: "fleet-table", tabindex: 0, role: "region", "aria-label": `Nodes of pool ${pool.name}, scrolls sideways` },
            table(`Nodes of pool ${pool.name}`, ["Node", "Scheduling", "Connectivity", "Last 24 h", "Validation", "GPUs reserved", "CPUs reserved", "Memory MB reserved", "Detected GPUs", "Members", "Last heartbeat", ...(operator ? ["Actions"] : [])], rows),
          )
        : h("p", {}, pool.backend === "local" ? "No nodes (a local pool runs on the control plane's own engine). " : "No nodes. ", operator && removeButton("pool", pool.name)),
    );
  });
  // Redraw every 15 s while this page is shown; one timer at a time; waits while the tab is hidden.
  const hash = location.hash;
  const tick = (): void => {
    if (location.hash !== hash || main.dataset.page !== "fleet") return;
    if (document.hidden) timer = window.setTimeout(tick, REFRESH_MS);
    else void fleetPage(main, true).catch(() => undefined);
  };
  window.clearTimeout(timer);
  timer = window.setTimeout(tick, REFRESH_MS);
  main.dataset.page = "fleet";
  main.replaceChildren(
    h("h1", {}, "Fleet"),
    h("p", { class: "muted" }, `Updated ${new Date().toLocaleTimeString()}; refreshes every ${REFRESH_MS / 1000} s.`),
    status,
    ...(sections.length ? sections : [alertBox("No pools yet. Fix: `tp fleet apply fleet.toml`.")]),
  );
}
