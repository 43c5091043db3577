// The preview, resolved, in words first (where it runs, on what, the runtime and its digest,
// the queue, the estimated wait, the retry policy), the facts one per line, and the spec as
// JSON behind a disclosure. Nothing exists yet; "Confirm and submit" commits exactly this
// preview with a retry key, as `tp submit` does.
import { api, must, type Schemas } from "../api";
import { alertBox, h } from "../dom";
import { isGpu, roleWords, runtimeWords, sizeWords, summarySentence, waitWords } from "./words";

type Preview = Schemas["PreviewOut"];
type Wait = Schemas["WaitOut"];

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

// Escape closes an open disclosure and leaves focus on its summary.
export function closesOnEscape(details: HTMLDetailsElement): HTMLDetailsElement {
  details.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && details.open) {
      details.open = false;
      details.querySelector("summary")?.focus();
      event.stopPropagation();
    }
  });
  return details;
}

export function showPreview(out: HTMLElement, preview: Preview, wait: Wait | null): void {
  const s = preview.summary;
  const byRole = new Map((wait?.placements ?? []).map((p) => [p.role, p]));
  const several = s.roles.length > 1;
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
  const fact = (term: string, ...value: Array<Node | string>): Node[] => [h("dt", {}, term), h("dd", {}, ...value)];
  out.replaceChildren(
    h(
      "section",
      { "aria-labelledby": "preview-title", class: "preview" },
      h("h2", { id: "preview-title" }, "Preview"),
      h("p", { class: "summary", id: "preview-summary" }, summarySentence(s, wait)),
      h(
        "dl",
        { class: "facts" },
        ...fact("Preview", preview.id),
        ...fact("Digest", h("code", {}, preview.digest)),
        ...fact("Expires", new Date(preview.expires_at).toLocaleString()),
        ...fact("Fleet / pool", s.roles.map((r) => `${several ? `${r.name}: ` : ""}fleet ${byRole.get(r.name)?.fleet ?? "(pool not in the fleet)"}, pool ${byRole.get(r.name)?.pool ?? r.pool}`).join("; ")),
        ...fact("Backend", s.backend),
        ...fact(isGpu(s) ? "GPU request" : "CPU request", s.roles.map((r) => `${several ? `${r.name}: ` : ""}${roleWords(r, byRole.get(r.name))}`).join("; ")),
        ...fact("Runtime", runtimeWords(s)),
        ...fact("Queue", s.queue),
        ...fact("Estimated wait", h("span", { class: "estimate" }, waitWords(wait))),
        ...fact("Retry", s.retry),
        ...fact("Source", s.source ? `${s.source.digest} (${sizeWords(s.source.size)})` : "none"),
        ...fact("Environment", s.env.length ? s.env.join(", ") : "none"),
        ...fact("Plugins", s.plugins.length ? s.plugins.map((p) => `${p.name} ${p.version}`).join(", ") : "none"),
      ),
      closesOnEscape(
        h(
          "details",
          { class: "spec-json" },
          h("summary", {}, "The spec as JSON"),
          h("pre", { class: "spec", role: "region", tabindex: "0", "aria-label": "What will run" }, JSON.stringify(preview.spec, null, 2)),
        ),
      ),
      confirm,
      status,
    ),
  );
  confirm.focus();
}
