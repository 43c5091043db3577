// A tiny element builder. Text always goes in as text nodes (never HTML), so nothing the API
// returns can inject markup into the page.
export type Child = Node | string | number | null | undefined | false;
export type Attrs = Record<string, string | boolean | number | undefined | EventListener>;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === false) continue;
    if (typeof value === "function") el.addEventListener(key.replace(/^on/, ""), value);
    else if (value === true) el.setAttribute(key, "");
    else el.setAttribute(key, String(value));
  }
  append(el, ...children);
  return el;
}

export function append(el: Element, ...children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    el.append(typeof child === "object" ? child : document.createTextNode(String(child)));
  }
}

// A table wider than the page scrolls sideways in its own box (style.css); it is focusable so
// that the keyboard can scroll it (WCAG 2.1.1; axe's scrollable-region-focusable), named by its
// caption.
export function table(caption: string, headers: string[], rows: Child[][]): HTMLTableElement {
  return h(
    "table",
    { tabindex: "0" },
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, ...headers.map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, ...rows.map((r) => h("tr", {}, ...r.map((c) => h("td", {}, c))))),
  );
}

export function when(iso: string | null | undefined): string {
  if (!iso) return "—";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toLocaleString();
}

export function alertBox(message: string): HTMLElement {
  return h("p", { role: "alert", class: "error" }, message);
}

// Each route() draws a new view (main.dataset.view). A page that awaited its data draws only if
// its view is still the one shown: a slow answer never draws over a page the user moved to.
export function view(main: HTMLElement): string | undefined {
  return main.dataset.view;
}

export function shown(main: HTMLElement, mine: string | undefined): boolean {
  return main.dataset.view === mine;
}
