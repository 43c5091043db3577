// The log view: the last MAX_LINES lines (older ones dropped, and said so, with the whole log
// to download), a search (substring or regular expression, case-insensitive; matches marked
// with <mark> elements built as DOM nodes; Enter / Shift+Enter for the next / previous one;
// "3 of 17"), and a Follow toggle: new lines scroll into view while it is on; scrolling up
// turns it off, scrolling back to the bottom turns it on again.
import { h } from "../../dom";
import { countWords, LineBuffer, MAX_LINES, matcher, pieces, type Matcher } from "./logtext";

export interface LogView {
  el: HTMLElement;
  pre: HTMLElement;
  reset(): void; // empty, for another member's log
  append(chunk: string): void;
  note(text: string): void; // a line below the log (its end, an error)
  following(live: boolean): void; // show the Follow toggle (a live stream) or not
}

export function logView(download: () => Promise<void>): LogView {
  let buffer = new LineBuffer();
  let match: Matcher | null = null;
  let current: HTMLElement | null = null; // the selected <mark>
  let follow = true;
  let partialEl: Node | null = null;
  let nodes: Node[] = []; // one per complete line shown, in order

  const pre = h("pre", { class: "logs", role: "log", tabindex: "0", "aria-label": "Job log" });
  const search = h("input", { type: "search", id: "log-search", autocomplete: "off", "aria-describedby": "log-search-help" });
  const regex = h("input", { type: "checkbox", id: "log-regex" });
  const count = h("span", { class: "log-count", role: "status", "aria-live": "polite" });
  const problem = h("p", { class: "error", role: "alert", hidden: true });
  const prev = h("button", { type: "button" }, "Previous match");
  const next = h("button", { type: "button" }, "Next match");
  const followBtn = h("button", { type: "button", "aria-pressed": "true", hidden: true }, "Follow");
  const dropped = h("p", { class: "muted", hidden: true });
  const saveBtn = h("button", { type: "button" }, "Download the whole log");
  const status = h("p", { class: "muted log-note" });

  const marks = (): HTMLElement[] => [...pre.querySelectorAll<HTMLElement>("mark")];
  const showCount = (): void => {
    if (!match || "error" in match) return void count.replaceChildren("");
    const all = marks();
    count.textContent = countWords(current ? all.indexOf(current) : -1, all.length);
  };

  // One line: a text node, or a span with its matches marked (text nodes only, never HTML).
  // Plain text nodes keep a long log light (5,000 elements made axe-core and layout slow).
  const lineEl = (text: string, newline: boolean): Node => {
    const ranges = match && "find" in match ? match.find(text) : [];
    const end = newline ? "\n" : "";
    if (!ranges.length) return document.createTextNode(text + end);
    const el = h("span", { class: "line" });
    for (const p of pieces(text, ranges)) el.append(p.mark ? h("mark", {}, p.text) : document.createTextNode(p.text));
    el.append(end);
    return el;
  };

  const atBottom = (): boolean => pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  let paused = false; // Follow turned off with its button or by moving to a match
  const setFollow = (on: boolean): void => {
    follow = on;
    if (on) paused = false;
    followBtn.setAttribute("aria-pressed", String(on));
    if (on) pre.scrollTop = pre.scrollHeight;
  };
  pre.addEventListener("scroll", () => {
    if (followBtn.hidden) return;
    const bottom = atBottom();
    if (bottom !== follow) setFollow(bottom); // up: paused; back at the bottom: on again
  });
  followBtn.addEventListener("click", () => {
    paused = follow;
    setFollow(!follow);
  });

  const showDropped = (): void => {
    dropped.hidden = buffer.dropped === 0;
    dropped.replaceChildren(`Showing the last ${MAX_LINES.toLocaleString("en")} lines: ${buffer.dropped.toLocaleString("en")} earlier line${buffer.dropped === 1 ? " was" : "s were"} dropped from the page. `, saveBtn.cloneNode(true));
    dropped.querySelector("button")!.addEventListener("click", save);
  };

  const append = (chunk: string): void => {
    // Stick to the bottom when the view is there now, unless the user paused Follow: a scroll
    // up whose event is not handled yet is not undone by lines arriving meanwhile, and a
    // scroll back to the bottom is not lost to them either.
    const stick = !followBtn.hidden && !paused && atBottom();
    if (stick && !follow) setFollow(true);
    const pushed = buffer.push(chunk);
    if (partialEl) pre.removeChild(partialEl);
    partialEl = null;
    const frag = document.createDocumentFragment();
    for (const line of pushed.added) {
      const node = lineEl(line, true);
      nodes.push(node);
      frag.append(node);
    }
    if (pushed.partial) frag.append((partialEl = lineEl(pushed.partial, false)));
    pre.append(frag);
    for (const old of nodes.splice(0, pushed.removeOld)) {
      if (current && old.contains(current)) current = null;
      pre.removeChild(old);
    }
    if (pushed.removeOld || pushed.added.length >= MAX_LINES) showDropped();
    showCount();
    if (stick) pre.scrollTop = pre.scrollHeight;
  };

  // Search again over every line kept (a new query): the marks are drawn anew.
  const redraw = (): void => {
    const q = search.value;
    match = matcher(q, regex.checked);
    problem.hidden = !(match && "error" in match);
    problem.textContent = match && "error" in match ? match.error : "";
    search.setAttribute("aria-invalid", String(!problem.hidden));
    current = null;
    const frag = document.createDocumentFragment();
    nodes = buffer.lines.map((line) => lineEl(line, true));
    frag.append(...nodes);
    partialEl = buffer.partial ? lineEl(buffer.partial, false) : null;
    if (partialEl) frag.append(partialEl);
    pre.replaceChildren(frag);
    showCount();
  };

  const go = (step: 1 | -1): void => {
    const all = marks();
    if (!all.length) return showCount();
    const at = current ? all.indexOf(current) : step > 0 ? -1 : 0;
    current?.classList.remove("current");
    current = all[(at + step + all.length) % all.length];
    current.classList.add("current");
    if (!followBtn.hidden) {
      paused = true; // the user is reading a match: stop scrolling away
      setFollow(false);
    }
    current.scrollIntoView({ block: "nearest" });
    showCount();
  };

  search.addEventListener("input", redraw);
  regex.addEventListener("change", redraw);
  search.addEventListener("keydown", (e) => {
    if (e.key !== "Enter") return;
    e.preventDefault();
    go(e.shiftKey ? -1 : 1);
  });
  prev.addEventListener("click", () => go(-1));
  next.addEventListener("click", () => go(1));

  async function save(): Promise<void> {
    status.textContent = "Downloading the whole log…";
    try {
      await download();
      status.textContent = "";
    } catch (err) {
      status.textContent = `Download failed: ${err instanceof Error ? err.message : String(err)}`;
    }
  }
  saveBtn.addEventListener("click", () => void save());

  const el = h(
    "div",
    { class: "log-view" },
    h(
      "div",
      { class: "log-tools", role: "search", "aria-label": "Search the log" },
      h("label", { for: "log-search" }, "Search log"),
      search,
      h("label", { class: "inline" }, regex, " Regular expression"),
      prev,
      next,
      count,
      followBtn,
      saveBtn,
    ),
    h("p", { id: "log-search-help", class: "muted help" }, "Case-insensitive. Enter: next match; Shift+Enter: previous match."),
    problem,
    dropped,
    pre,
    status,
  );
  return {
    el,
    pre,
    reset() {
      buffer = new LineBuffer();
      current = null;
      partialEl = null;
      nodes = [];
      pre.replaceChildren();
      dropped.hidden = true;
      status.textContent = "";
      showCount();
    },
    append,
    note(text) {
      status.textContent = text;
    },
    following(live) {
      followBtn.hidden = !live;
      if (live) setFollow(true);
    },
  };
}
