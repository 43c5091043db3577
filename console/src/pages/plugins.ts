import { api, must } from "../api";
import { h, shown, table, view, when } from "../dom";


// Published plugins grouped by purpose, with their capabilities and where each one executes
// (control plane, node or workload). Every group is listed, an empty one too.
export async function pluginsPage(main: HTMLElement): Promise<void> {
  const mine = view(main);
  main.replaceChildren(h("h1", {}, "Plugins"), h("p", { "aria-busy": "true" }, "Loading…"));
  const { groups } = await must(api.GET("/v1/plugins"));
  if (!shown(main, mine)) return; // the user moved on meanwhile
  const sections = groups.map((g) =>
    h(
      "section",
      { "aria-labelledby": `group-${g.group}` },
      h("h2", { id: `group-${g.group}` }, g.group),
      h("p", { class: "muted" }, g.description),
      g.plugins.length
        ? table(
            `Plugins for ${g.group}`,
            ["Plugin", "Version", "Executes", "Capabilities", "Description", "Published", "Status"],
            g.plugins.map((p) => [
              p.name,
              p.version,
              h("span", { title: p.executes_description }, p.executes, h("br", {}), h("small", { class: "muted" }, p.executes_description)),
              p.capabilities.length
                ? h("ul", {}, ...p.capabilities.map((c) => h("li", {}, h("code", {}, c.name), c.description ? ` — ${c.description}` : "")))
                : "—",
              p.description,
              `${p.published_by}, ${when(p.published_at)}`,
              p.disabled ? `disabled by ${p.disabled.by}: ${p.disabled.reason}` : "enabled",
            ]),
          )
        : h("p", {}, "None published. Publish one with `tp plugin publish DIR`."),
    ),
  );
  main.replaceChildren(h("h1", {}, "Plugins"), ...sections);
}
