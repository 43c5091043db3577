// The chart settings a page's charts share (smoothing, x axis, log y, min/max bands) and the
// toolbar that edits them. Each control is a labelled form field, so the keyboard reaches it.
import { h } from "../dom";
import { X_MODES, type XMode } from "./model";

export interface Settings {
  smoothing: number; // TensorBoard's weight, 0 (none) to 0.99
  xMode: XMode;
  logY: boolean;
  bands: boolean;
}

export class SettingsStore {
  private listeners = new Set<(now: Settings, before: Settings) => void>();
  constructor(public value: Settings = { smoothing: 0.6, xMode: "step", logY: false, bands: true }) {}
  set(patch: Partial<Settings>): void {
    const before = this.value;
    this.value = { ...before, ...patch };
    for (const f of this.listeners) f(this.value, before);
  }
  subscribe(f: (now: Settings, before: Settings) => void): () => void {
    this.listeners.add(f);
    return () => this.listeners.delete(f);
  }
}

let bars = 0;

export function settingsBar(store: SettingsStore): HTMLElement {
  const id = `cs${++bars}`;
  const s = store.value;
  const slider = h("input", { id: `${id}-smooth`, type: "range", min: "0", max: "0.99", step: "0.01", value: String(s.smoothing) });
  const shownWeight = h("output", { for: `${id}-smooth` }, s.smoothing.toFixed(2));
  slider.addEventListener("input", () => {
    shownWeight.textContent = Number(slider.value).toFixed(2);
    store.set({ smoothing: Number(slider.value) });
  });
  const xSelect = h("select", { id: `${id}-x` }, ...X_MODES.map(([v, t]) => h("option", { value: v, selected: v === s.xMode }, t)));
  xSelect.addEventListener("change", () => store.set({ xMode: xSelect.value as XMode }));
  const log = h("input", { id: `${id}-log`, type: "checkbox", checked: s.logY });
  log.addEventListener("change", () => store.set({ logY: log.checked }));
  const bands = h("input", { id: `${id}-bands`, type: "checkbox", checked: s.bands });
  bands.addEventListener("change", () => store.set({ bands: bands.checked }));
  return h(
    "div",
    { class: "chart-settings", role: "group", "aria-label": "Chart settings" },
    h("span", {}, h("label", { for: `${id}-smooth` }, "Smoothing "), slider, " ", shownWeight),
    h("span", {}, h("label", { for: `${id}-x` }, "X axis "), xSelect),
    h("span", {}, log, h("label", { for: `${id}-log` }, " Log scale (y)")),
    h("span", {}, bands, h("label", { for: `${id}-bands` }, " Min/max bands")),
  );
}
