// A source from the browser: a folder packed here into a .tar.gz (deterministic: sorted
// entries, mtime 0, no owners), or a .tar.gz/.tar sent as it is; uploaded to POST /v1/archives
// (the CLI's route, limits and digest check) with its progress shown.
import { createTar } from "nanotar";
import { token, type Schemas } from "../api";
import type { Picked } from "./source";

type Archive = Schemas["ArchiveOut"];

export async function packFolder(files: Map<string, File>, kept: Picked[]): Promise<Blob> {
  const entries = [];
  for (const f of kept) {
    const file = files.get(f.path);
    if (!file) continue;
    const data = new Uint8Array(await file.arrayBuffer());
    entries.push({ name: f.path, data, attrs: { mode: f.path.endsWith(".sh") ? "755" : "644", mtime: 0, uid: 0, gid: 0, user: "", group: "" } });
  }
  const tar = createTar(entries);
  const gz = new Blob([new Uint8Array(tar)]).stream().pipeThrough(new CompressionStream("gzip"));
  return new Blob([await new Response(gz).arrayBuffer()], { type: "application/gzip" });
}

// "sha256:<hex>" where the browser can compute it (a secure context: https or loopback), else
// null: the server then stores what arrived without comparing.
export async function sha256(blob: Blob): Promise<string | null> {
  if (!globalThis.crypto?.subtle) return null;
  const sum = new Uint8Array(await crypto.subtle.digest("SHA-256", await blob.arrayBuffer()));
  return `sha256:${Array.from(sum, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

function problemOf(status: number, text: string): string {
  try {
    const p: unknown = JSON.parse(text);
    if (typeof p === "object" && p !== null) {
      const detail = "detail" in p && typeof p.detail === "string" ? p.detail : `${status}`;
      const fix = "fix" in p && typeof p.fix === "string" && p.fix ? ` Fix: ${p.fix}` : "";
      return `${detail}.${fix}`;
    }
  } catch {
    // not JSON: the status says it
  }
  return `the server answered ${status}`;
}

// XMLHttpRequest rather than fetch: only it reports an upload's progress.
export function upload(blob: Blob, digest: string | null, onProgress: (sent: number, total: number) => void): Promise<Archive> {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/v1/archives");
    const secret = token.get();
    if (secret) xhr.setRequestHeader("Authorization", `Bearer ${secret}`);
    xhr.setRequestHeader("Content-Type", "application/octet-stream");
    if (digest) xhr.setRequestHeader("X-Content-Digest", digest);
    xhr.upload.addEventListener("progress", (e) => onProgress(e.loaded, e.lengthComputable ? e.total : blob.size));
    xhr.addEventListener("error", () => reject(new Error("the upload did not reach the server (network error)")));
    xhr.addEventListener("load", () => {
      if (xhr.status === 401 && secret !== null && secret === token.get()) {
        token.clear();
        window.dispatchEvent(new CustomEvent("tp:signed-out", { detail: "Your token was refused; sign in again." }));
      }
      if (xhr.status !== 201) return reject(new Error(problemOf(xhr.status, xhr.responseText)));
      const body: unknown = JSON.parse(xhr.responseText);
      if (typeof body === "object" && body !== null && "digest" in body && typeof body.digest === "string" && "size" in body && typeof body.size === "number") {
        resolve({ digest: body.digest, size: body.size });
      } else reject(new Error("the server's answer to the upload is not an archive's digest and size"));
    });
    xhr.send(blob);
  });
}
