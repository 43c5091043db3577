import { api, must, type Schemas } from "../api";
import { alertBox, h, shown, view } from "../dom";

type Param = Schemas["ParamOut"];
type Preview = Schemas["PreviewOut"];
type Wait = Schemas["WaitOut"];

// The runtime the preview resolved, as the spec holds it.
function runtimeOf(spec: Record<string, unknown>): { name: string; image: string; digest: string } | null {
  const r = spec.runtime;
  if (typeof r !== "object" || r === null) return null;
  const text = (k: string): string => (k in r ? String((r as Record<string, unknown>)[k] ?? "") : "");
  return { name: text("name"), image: text("image"), digest: text("digest") };
}

// A fresh uuid4 for the retry key, as the CLI makes one (crypto.randomUUID needs a secure
// context; getRandomValues does not).
function uuid4(): string {
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const x = Array.from(b, (v) => v.toString(16).padStart(2, "0")).join("");
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}

// The retry key belongs to one preview and is kept for this tab, so confirming again after a
// lost answer sends the same (preview id, digest, retry key) triple and gets the same job back.
function retryKey(previewId: string): string {
  const key = `tuneplane.retry.${previewId}`;
  const known = sessionStorage.getItem(key);
  if (known) return known;
  const fresh = uuid4();
  sessionStorage.setItem(key, fresh);
  return fresh;
}

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

// Submit without the CLI: choose a method, a profile and its parameters, preview (POST
// /v1/previews), then confirm that exact preview (POST /v1/jobs with its id, digest and a retry
// key), as `tp submit` does. No source upload: a method that needs the user's files is for the CLI.
export async function submitPage(main: HTMLElement): Promise<void> {
  const mine = view(main);
  main.replaceChildren(h("h1", {}, "Submit a job"), h("p", { "aria-busy": "true" }, "Loading…"));
  const [methods, profiles] = await Promise.all([must(api.GET("/v1/methods")), must(api.GET("/v1/profiles"))]);
  if (!shown(main, mine)) return; // the user moved on meanwhile
  const experiment = h("input", { id: "s-experiment", name: "experiment", required: true, value: "console" });
  const method = h("select", { id: "s-method", name: "method" }, ...methods.map((m) => h("option", { value: m.name }, m.name)));
  const profile = h("input", { id: "s-profile", name: "profile", required: true, list: "s-profiles", value: "cpu:1" });
  const queue = h("input", { id: "s-queue", name: "queue", placeholder: "your default queue" });
  const params = h("fieldset", {}, h("legend", {}, "Parameters"));
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
    { "aria-labelledby": "submit-title" },
    field("s-experiment", "Experiment", experiment),
    field("s-method", "Method", method),
    field("s-profile", "Profile", profile, "e.g. cpu:1, h200:8 or a named profile"),
    h("datalist", { id: "s-profiles" }, ...profiles.map((p) => h("option", { value: p.name }))),
    field("s-queue", "Queue", queue),
    params,
    previewButton,
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const m = methods.find((x) => x.name === method.value);
    const values: Record<string, string | number | boolean> = {};
    for (const el of params.querySelectorAll<HTMLInputElement | HTMLSelectElement>("[data-param]")) {
      const p = m?.params.find((x) => x.name === el.dataset.param);
      if (p && el.value !== "" && el.value !== (p.default === null ? "" : String(p.default))) values[p.name] = paramValue(p, el.value);
    }
    const body = {
      experiment: experiment.value.trim(),
      method: method.value,
      profile: profile.value.trim(),
      queue: queue.value.trim() || null,
      params: values,
    };
    previewButton.disabled = true;
    out.replaceChildren();
    must(api.POST("/v1/previews", { body }))
      .then(async (preview) => showPreview(out, preview, await must(api.GET("/v1/previews/{preview_id}/wait", { params: { path: { preview_id: preview.id } } })).catch(() => null)))
      .catch((err: unknown) => out.replaceChildren(alertBox(`Preview refused: ${err instanceof Error ? err.message : String(err)}`)))
      .finally(() => {
        previewButton.disabled = false;
      });
  });
  main.replaceChildren(h("h1", { id: "submit-title" }, "Submit a job"), form, out);
}

function estimate(wait: Wait | null): string {
  if (!wait) return "unknown (the estimate could not be computed)";
  if (wait.starts_now) return "none: it would start at once";
  const ahead = wait.ahead === 1 ? "1 job" : `${wait.ahead} jobs`;
  return `would wait behind ${ahead} (position ${wait.position} of ${wait.pending_total} pending): ${wait.text}`;
}

// The preview, resolved: where it runs, on what, with which runtime, and the estimated wait (a
// queue position and its reason, GET /v1/previews/{id}/wait: nobody knows how long the jobs
// ahead will run). Nothing exists yet; "Confirm and submit" commits exactly this preview.
function showPreview(out: HTMLElement, preview: Preview, wait: Wait | null): void {
  const runtime = runtimeOf(preview.spec);
  const where = wait?.placements ?? [];
  const roles = where.length > 1;
  const confirm = h("button", { type: "button" }, "Confirm and submit");
  const status = h("div", { "aria-live": "polite" });
  confirm.addEventListener("click", () => {
    confirm.disabled = true;
    const triple = { preview_id: preview.id, digest: preview.digest, retry_key: retryKey(preview.id) };
    must(api.POST("/v1/jobs", { body: triple }))
      .then((commit) => {
        location.hash = `#/jobs/${encodeURIComponent(commit.job_id)}`;
      })
      .catch((err: unknown) => {
        status.replaceChildren(alertBox(`Not submitted: ${err instanceof Error ? err.message : String(err)}. Confirming again is safe: it cannot start a second job.`));
        confirm.disabled = false;
      });
  });
  out.replaceChildren(
    h("section", { "aria-labelledby": "preview-title", class: "preview" },
      h("h2", { id: "preview-title" }, "Preview"),
      h("dl", { class: "facts" },
        h("dt", {}, "Preview"), h("dd", {}, preview.id),
        h("dt", {}, "Digest"), h("dd", {}, h("code", {}, preview.digest)),
        h("dt", {}, "Expires"), h("dd", {}, new Date(preview.expires_at).toLocaleString()),
        h("dt", {}, "Fleet / pool"), h("dd", {}, where.map((p) => `${roles ? `${p.role}: ` : ""}fleet ${p.fleet ?? "(pool not in the fleet)"}, pool ${p.pool}`).join("; ") || "—"),
        h("dt", {}, "Backend"), h("dd", {}, String(preview.spec.backend ?? "—")),
        h("dt", {}, "GPU request"), h("dd", {}, where.map((p) => `${roles ? `${p.role}: ` : ""}${p.request}`).join("; ") || "—"),
        h("dt", {}, "Runtime"), h("dd", {}, runtime ? `${runtime.name} (${runtime.image}${runtime.digest ? `@${runtime.digest.slice(0, 19)}…` : ""})` : "—"),
        h("dt", {}, "Queue"), h("dd", {}, String(preview.spec.queue ?? "—")),
        h("dt", {}, "Estimated wait"), h("dd", { class: "estimate" }, estimate(wait)),
      ),
      h("pre", { class: "spec", role: "region", tabindex: "0", "aria-label": "What will run" }, JSON.stringify(preview.spec, null, 2)),
      confirm,
      status,
    ),
  );
  confirm.focus();
}
