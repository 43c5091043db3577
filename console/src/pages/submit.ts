import "../submit/submit.css";
import { api, must, type Schemas } from "../api";
import { alertBox, h, shown, view } from "../dom";
import { envRows, pluginPins, runtimeSelect } from "../submit/options";
import { showPreview } from "../submit/preview";
import { sourceField } from "../submit/source-field";

type Param = Schemas["ParamOut"];

function field(id: string, label: string, control: HTMLElement, help = ""): HTMLElement {
  if (help) control.setAttribute("aria-describedby", `${id}-help`);
  return h("div", { class: "field" }, h("label", { for: id }, label), control, help ? h("small", { id: `${id}-help`, class: "muted" }, help) : "");
}

function paramValue(p: Param, raw: string): string | number | boolean {
  if (p.type === "int") return parseInt(raw, 10);
  if (p.type === "float") return parseFloat(raw);
  if (p.type === "bool") return raw === "true";
  return raw;
}

// Submit without the CLI: a method, a profile and its parameters, the source (a folder or an
// archive, uploaded as `tp submit` uploads it), runtime, environment, plugin pins and retries;
// preview (POST /v1/previews, then its estimated wait), and confirm that exact preview (POST
// /v1/jobs with its id, digest and a retry key).
export async function submitPage(main: HTMLElement): Promise<void> {
  const mine = view(main);
  main.replaceChildren(h("h1", {}, "Submit a job"), h("p", { "aria-busy": "true" }, "Loading…"));
  const [methods, profiles, runtimes, plugins, limits] = await Promise.all([
    must(api.GET("/v1/methods")),
    must(api.GET("/v1/profiles")),
    must(api.GET("/v1/runtimes")),
    must(api.GET("/v1/plugins")),
    must(api.GET("/v1/archives/limits")),
  ]);
  if (!shown(main, mine)) return; // the user moved on meanwhile
  const experiment = h("input", { id: "s-experiment", name: "experiment", required: true, value: "console" });
  const method = h("select", { id: "s-method", name: "method" }, ...methods.map((m) => h("option", { value: m.name }, m.name)));
  const profile = h("input", { id: "s-profile", name: "profile", required: true, list: "s-profiles", value: "cpu:1" });
  const queue = h("input", { id: "s-queue", name: "queue", placeholder: "your default queue" });
  const params = h("fieldset", {}, h("legend", {}, "Parameters"));
  const source = sourceField(limits);
  const runtime = runtimeSelect(runtimes);
  const env = envRows();
  const pins = pluginPins(plugins);
  const attempts = h("input", { id: "s-attempts", name: "attempts", type: "number", min: 1, max: 100, step: 1, value: 1, inputmode: "numeric" });
  const out = h("div", { "aria-live": "polite" });
  const previewButton = h("button", { type: "submit" }, "Preview");

  const drawParams = (): void => {
    const m = methods.find((x) => x.name === method.value);
    params.replaceChildren(h("legend", {}, "Parameters"), h("p", { class: "muted" }, m?.description ?? ""));
    for (const p of m?.params ?? []) {
      const id = `p-${p.name}`;
      const value = p.default === null ? "" : String(p.default);
      const control = p.choices.length
        ? h("select", { id, name: p.name, "data-param": p.name }, ...p.choices.map((c) => h("option", { value: String(c), selected: String(c) === value }, String(c))))
        : h("input", { id, name: p.name, "data-param": p.name, value, required: p.required, inputmode: p.type === "str" ? undefined : "decimal" });
      params.append(field(id, `${p.name}${p.required ? " (required)" : ""}`, control, `${p.type}. ${p.help}`));
    }
  };
  method.addEventListener("change", drawParams);
  drawParams();

  const form = h(
    "form",
    { "aria-labelledby": "submit-title", class: "submit-form" },
    field("s-experiment", "Experiment", experiment),
    field("s-method", "Method", method),
    field("s-profile", "Profile", profile, "e.g. cpu:1, h200:8 or a named profile"),
    h("datalist", { id: "s-profiles" }, ...profiles.map((p) => h("option", { value: p.name }))),
    field("s-queue", "Queue", queue),
    params,
    source.element,
    field("s-runtime", "Runtime", runtime, "the image the job runs in, pinned by digest at preview"),
    env.element,
    pins.element,
    field("s-attempts", "Attempts", attempts, "in all, as tp submit --retry N: 1 is no retry; more is a new attempt after any end but a stop (a lost node, a preemption, a failed launch, a failure), as the queue allows"),
    previewButton,
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    out.replaceChildren();
    if (source.busy()) {
      out.replaceChildren(alertBox("The source is still uploading. Fix: wait for “Uploaded”, then preview."));
      return;
    }
    const { env: variables, problem } = env.read();
    if (problem) {
      out.replaceChildren(alertBox(problem.message));
      return;
    }
    const m = methods.find((x) => x.name === method.value);
    const values: Record<string, string | number | boolean> = {};
    for (const el of params.querySelectorAll<HTMLInputElement | HTMLSelectElement>("[data-param]")) {
      const p = m?.params.find((x) => x.name === el.dataset.param);
      if (p && el.value !== "" && el.value !== (p.default === null ? "" : String(p.default))) values[p.name] = paramValue(p, el.value);
    }
    const tries = parseInt(attempts.value, 10);
    const body = {
      experiment: experiment.value.trim(),
      method: method.value,
      profile: profile.value.trim(),
      queue: queue.value.trim() || null,
      params: values,
      runtime: runtime.value || null,
      source: source.value(),
      env: variables,
      plugins: pins.read(),
      retry: Number.isFinite(tries) && tries > 1 ? { max_attempts: tries } : null,
    };
    previewButton.disabled = true;
    must(api.POST("/v1/previews", { body }))
      .then(async (preview) => showPreview(out, preview, await must(api.GET("/v1/previews/{preview_id}/wait", { params: { path: { preview_id: preview.id } } })).catch(() => null)))
      .catch((err: unknown) => out.replaceChildren(alertBox(`Preview refused: ${err instanceof Error ? err.message : String(err)}`)))
      .finally(() => {
        previewButton.disabled = false;
      });
  });
  main.replaceChildren(h("h1", { id: "submit-title" }, "Submit a job"), form, out);
}
