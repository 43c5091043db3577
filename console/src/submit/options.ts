// Runtime, environment, plugin pins and retry: the choices `tp submit` takes from
// experiment.toml and its flags.
import type { Schemas } from "../api";
import { h } from "../dom";
import { checkEnv, type EnvProblem, MAX_ENV } from "./env";

type Runtime = Schemas["RuntimeOut"];
type PluginList = Schemas["PluginListOut"];
type Pin = Schemas["PluginPinIn"];

export function runtimeSelect(runtimes: Runtime[]): HTMLSelectElement {
  return h(
    "select",
    { id: "s-runtime", name: "runtime", "aria-describedby": "s-runtime-help" },
    h("option", { value: "" }, "the method's default"),
    ...runtimes.map((r) => h("option", { value: r.name }, `${r.name} (${r.image})`)),
  );
}

export interface EnvRows {
  element: HTMLElement;
  // the variables, or the first problem (announced, and focus moved to its field)
  read: () => { env: Record<string, string>; problem: EnvProblem | null };
}

export function envRows(): EnvRows {
  const rows = h("div", { class: "env-rows" });
  const add = h("button", { type: "button" }, "Add a variable");
  let count = 0;
  const addRow = (): void => {
    const n = ++count;
    const name = h("input", { id: `env-name-${n}`, "data-env": "name", autocomplete: "off", spellcheck: "false" });
    const value = h("input", { id: `env-value-${n}`, "data-env": "value", autocomplete: "off", spellcheck: "false" });
    const remove = h("button", { type: "button", "aria-label": `Remove variable ${n}` }, "Remove");
    const row = h("div", { class: "env-row" }, h("label", { for: name.id }, `Name ${n}`), name, h("label", { for: value.id }, `Value ${n}`), value, remove);
    remove.addEventListener("click", () => {
      row.remove();
      add.disabled = rows.children.length >= MAX_ENV;
      add.focus();
    });
    rows.append(row);
    add.disabled = rows.children.length >= MAX_ENV;
    name.focus();
  };
  add.addEventListener("click", addRow);
  const element = h(
    "fieldset",
    { class: "env" },
    h("legend", {}, "Environment variables"),
    h("p", { class: "help" }, `Set in every member: at most ${MAX_ENV}; names of letters, digits and _ (not TUNEPLANE_…).`),
    rows,
    add,
  );
  const read = (): ReturnType<EnvRows["read"]> => {
    const list = Array.from(rows.querySelectorAll<HTMLElement>(".env-row"));
    const values = list.map((row) => ({
      name: row.querySelector<HTMLInputElement>("[data-env=name]")!.value,
      value: row.querySelector<HTMLInputElement>("[data-env=value]")!.value,
    }));
    for (const input of rows.querySelectorAll("input")) input.removeAttribute("aria-invalid");
    const result = checkEnv(values);
    if (result.problem) {
      const bad = list[Math.min(result.problem.row, list.length - 1)]?.querySelector<HTMLInputElement>(`[data-env=${result.problem.part}]`);
      bad?.setAttribute("aria-invalid", "true");
      bad?.focus();
    }
    return result;
  };
  return { element, read };
}

export interface PluginPins {
  element: HTMLElement | null; // null: no plugin is published
  read: () => Pin[];
}

// One checkbox per published, enabled version: a checked one is pinned by its digest.
export function pluginPins(list: PluginList): PluginPins {
  const usable = list.groups.flatMap((g) => g.plugins.filter((p) => !p.disabled).map((p) => ({ group: g.group, p })));
  if (!usable.length) return { element: null, read: () => [] };
  const boxes = usable.map(({ group, p }, i) => {
    const box = h("input", { type: "checkbox", id: `pin-${i}`, "data-name": p.name, "data-version": p.version, "data-digest": p.digest });
    return h("div", { class: "check" }, box, h("label", { for: box.id }, `${p.name} ${p.version}`), h("span", { class: "muted" }, ` ${group}, runs on the ${p.executes}`));
  });
  const element = h("fieldset", { class: "pins" }, h("legend", {}, "Plugins"), ...boxes);
  const read = (): Pin[] =>
    Array.from(element.querySelectorAll<HTMLInputElement>("input:checked"), (b) => ({ name: b.dataset.name!, version: b.dataset.version!, digest: b.dataset.digest! }));
  return { element, read };
}
