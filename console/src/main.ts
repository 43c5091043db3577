import "./style.css";
import { api, must, token } from "./api";
import { alertBox, h } from "./dom";
import { comparePage } from "./pages/compare";
import { fleetPage } from "./pages/fleet";
import { jobPage } from "./pages/job";
import { jobsPage } from "./pages/jobs";
import { loginPage, type Whoami } from "./pages/login";
import { pluginsPage } from "./pages/plugins";
import { submitPage } from "./pages/submit";

// Hash routes (#/fleet, #/jobs?state=…, #/jobs/ID, #/compare?jobs=ID,ID, #/login): the server serves one index.html
// and never sees the route, so a reload keeps the page.
const main = document.getElementById("main") as HTMLElement;
const nav = document.getElementById("nav") as HTMLElement;
const who = document.getElementById("who") as HTMLElement;
let notice: string | null = null;
let views = 0; // each drawing of a route is a new view (dom.ts: shown)

function showUser(user: Whoami | null): void {
  nav.hidden = user === null;
  who.textContent = user ? `${user.name} (${user.role})` : "";
}

async function route(): Promise<void> {
  const [path, query = ""] = location.hash.replace(/^#/, "").split("?", 2);
  if (!token.get()) {
    showUser(null);
    // The sign-in form is a view too: a page still loading when the user signed out (or was
    // signed out) must not draw over it when its answers arrive.
    main.dataset.page = "login";
    main.dataset.view = String(++views);
    loginPage(main, notice, (user) => {
      notice = null;
      showUser(user);
      // The address asked for now, not when the form was drawn: it may have changed while the
      // token was being checked, and the user's latest choice wins.
      const asked = location.hash.replace(/^#/, "").split("?", 1)[0];
      if (!asked || asked === "/login") location.hash = "#/fleet";
      void route();
    });
    return;
  }
  if (nav.hidden) showUser(await must(api.GET("/v1/whoami")).catch(() => null));
  if (!token.get()) return route();
  for (const link of nav.querySelectorAll("a")) {
    const current = path.startsWith(link.getAttribute("href")!.slice(1));
    if (current) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  main.dataset.page = path.slice(1);
  main.dataset.view = String(++views);
  const mine = main.dataset.view;
  const focused = document.activeElement; // where the user was when this view was asked for
  try {
    const job = /^\/jobs\/([^/]+)$/.exec(path);
    if (job) await jobPage(main, decodeURIComponent(job[1]));
    else if (path === "/jobs") await jobsPage(main, new URLSearchParams(query));
    else if (path === "/compare") await comparePage(main, new URLSearchParams(query));
    else if (path === "/fleet") await fleetPage(main);
    else if (path === "/plugins") await pluginsPage(main);
    else if (path === "/submit") await submitPage(main);
    else location.hash = "#/fleet";
    // A new view: move focus to its content, so keyboard and screen-reader users start there;
    // not when the user moved the focus while the page loaded (tabbing through the menu), nor
    // when another view has replaced this one meanwhile.
    const now = document.activeElement;
    const untouched = now === document.body || now === focused;
    if (main.dataset.view === mine && untouched && (now === document.body || nav.contains(now))) main.focus();
  } catch (err) {
    if (!token.get()) return route();
    main.replaceChildren(h("h1", {}, "Something went wrong"), alertBox(err instanceof Error ? err.message : String(err)));
  }
}

window.addEventListener("hashchange", () => void route());
window.addEventListener("tp:signed-out", (event) => {
  notice = (event as CustomEvent<string>).detail;
  void route();
});
document.getElementById("logout")!.addEventListener("click", () => {
  token.clear();
  notice = "Signed out.";
  location.hash = "#/login";
  void route();
});
void route();
