// The job's output files (`GET /v1/jobs/{id}/artifacts`), each downloadable
// (`…/artifacts/{attempt}/{member}/file?path=`; a file kept on a node is sent by its node
// first; the server checks its SHA-256 as it streams, and the page checks it again where the
// browser can hash).
import { api, must } from "../../api";
import { h, table } from "../../dom";
import type { Job } from "../jobs";
import { artifactNotes } from "./artifactwords";
import { saveAs } from "./download";

export const MAX_PAGE_DOWNLOAD = 1024 ** 3; // the page holds a download in memory: past 1 GiB, the CLI

export function size(bytes: number): string {
  return bytes < 1024 ? `${bytes} B` : bytes < 1024 ** 2 ? `${(bytes / 1024).toFixed(1)} KiB` : bytes < 1024 ** 3 ? `${(bytes / 1024 ** 2).toFixed(1)} MiB` : `${(bytes / 1024 ** 3).toFixed(1)} GiB`;
}

async function sha256(blob: Blob): Promise<string | null> {
  if (!globalThis.crypto?.subtle) return null; // not a secure context: the server's check stands
  const bytes = new Uint8Array(await crypto.subtle.digest("SHA-256", await blob.arrayBuffer()));
  return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
}

export async function artifacts(job: Job): Promise<HTMLElement> {
  const found = await must(api.GET("/v1/jobs/{job_id}/artifacts", { params: { path: { job_id: job.id } } }));
  const status = h("p", { role: "status", class: "muted" });
  const rows = found.members.flatMap((m) =>
    m.files.map((f) => {
      let action: HTMLElement | string;
      if (f.size > MAX_PAGE_DOWNLOAD) action = h("code", {}, `tp artifacts get ${job.id} ${f.path} --attempt ${m.attempt} --member ${m.member}`);
      else {
        const button = h("button", { type: "button", "aria-label": `Download ${f.path} (attempt ${m.attempt}, member ${m.member})` }, "Download");
        button.addEventListener("click", () => {
          button.disabled = true;
          status.textContent = `Downloading ${f.path}${m.node ? ` (node ${m.node} sends it first)` : ""}…`;
          const path = `/v1/jobs/${encodeURIComponent(job.id)}/artifacts/${m.attempt}/${m.member}/file?path=${encodeURIComponent(f.path)}`;
          saveAs(path, f.path.split("/").pop() || "artifact")
            .then(async (blob) => {
              const got = await sha256(blob);
              if (got !== null && got !== f.sha256) throw new Error(`received SHA-256 ${got}, recorded ${f.sha256}: download it again`);
              status.textContent = `Downloaded ${f.path} (${size(blob.size)}${got ? ", SHA-256 checked" : ""}).`;
            })
            .catch((err: unknown) => {
              status.textContent = "";
              status.after(h("p", { role: "alert", class: "error" }, `${f.path}: ${err instanceof Error ? err.message : String(err)}`));
            })
            .finally(() => (button.disabled = false));
        });
        action = button;
      }
      return [m.attempt, m.member, f.path, size(f.size), h("code", { title: f.sha256 }, f.sha256.slice(0, 12)), m.node ? `node ${m.node}` : "control plane", action];
    }),
  );
  const notes = artifactNotes(job, found.members, found.records_outputs);
  return h(
    "div",
    {},
    rows.length ? table("Output files", ["Attempt", "Member", "Path", "Size", "SHA-256", "Kept on", "Download"], rows) : "",
    ...notes.map((n) => h("p", { class: "artifact-note" }, n)),
    status,
  );
}
