// The Source fieldset: a folder (packed here) or an archive, uploaded as soon as it is chosen,
// with the server's limit said before, the progress during, and the outcome or the refusal
// after. The preview then names the uploaded archive's digest.
import type { Schemas } from "../api";
import { alertBox, h } from "../dom";
import { archiveKind, checkSize, folderSelection, Refused, ALWAYS_LEFT_OUT } from "./source";
import { packFolder, sha256, upload } from "./upload";
import { digestShort, sizeWords } from "./words";

type Limits = Schemas["ArchiveLimitsOut"];
type Source = Schemas["SourceIn"];

export interface SourceField {
  element: HTMLElement;
  value: () => Source | null;
  busy: () => boolean;
}

export function sourceField(limits: Limits): SourceField {
  let chosen: Source | null = null;
  let working = false;
  // Each choice is a new generation: a slower upload of an earlier choice never replaces the
  // latest one (nor its refusal).
  let generation = 0;
  const folder = h("input", { id: "s-folder", type: "file", webkitdirectory: true, "aria-describedby": "s-source-help" });
  const archive = h("input", { id: "s-archive", type: "file", accept: ".tar.gz,.tgz,.tar,application/gzip,application/x-tar", "aria-describedby": "s-source-help" });
  const progress = h("progress", { max: 1, value: 0, "aria-label": "Upload progress", hidden: true });
  const status = h("div", { class: "source-status", "aria-live": "polite" });
  const clear = h("button", { type: "button", hidden: true }, "Remove the source");

  const reset = (): void => {
    chosen = null;
    folder.value = "";
    archive.value = "";
    clear.hidden = true;
  };
  const refuse = (err: unknown): void => {
    reset();
    progress.hidden = true;
    const text = err instanceof Refused ? `Not uploaded: ${err.message}. Fix: ${err.fix}` : `Upload refused: ${err instanceof Error ? err.message : String(err)}`;
    status.replaceChildren(alertBox(text));
  };
  const send = async (blob: Blob, what: string, extra: string[], mine: number): Promise<void> => {
    if (mine !== generation) return; // another choice came meanwhile
    checkSize(what, blob.size, limits.max_bytes, sizeWords);
    progress.hidden = false;
    progress.value = 0;
    status.replaceChildren(h("p", {}, `Uploading ${what} (${sizeWords(blob.size)})…`));
    const done = await upload(blob, await sha256(blob), (sent, total) => {
      if (mine !== generation) return;
      progress.value = total ? sent / total : 0;
      status.firstElementChild!.textContent = `Uploading ${what}: ${sizeWords(sent)} of ${sizeWords(total)}`;
    });
    if (mine !== generation) return;
    chosen = { digest: done.digest, size: done.size };
    progress.value = 1;
    clear.hidden = false;
    status.replaceChildren(h("p", { class: "source-done" }, `Uploaded ${what}: ${sizeWords(done.size)}, ${digestShort(done.digest)}.`), ...extra.map((t) => h("p", { class: "muted" }, t)));
  };
  const run = (job: (mine: number) => Promise<void>): void => {
    const mine = ++generation;
    working = true;
    chosen = null;
    clear.hidden = true;
    job(mine)
      .catch((err: unknown) => {
        if (mine === generation) refuse(err);
      })
      .finally(() => {
        if (mine === generation) working = false;
      });
  };

  folder.addEventListener("change", () => {
    archive.value = "";
    const files = Array.from(folder.files ?? []);
    if (!files.length) return;
    run(async (mine) => {
      const byPath = new Map<string, File>();
      for (const f of files) byPath.set(f.webkitRelativePath.slice(f.webkitRelativePath.indexOf("/") + 1) || f.name, f);
      const ignore = byPath.get(".gitignore");
      const picked = files.map((f) => ({ path: f.webkitRelativePath || f.name, size: f.size }));
      const rules = ignore ? await ignore.text() : null;
      if (mine !== generation) return;
      const { kept, left } = folderSelection(picked, rules);
      const total = kept.reduce((n, f) => n + f.size, 0);
      checkSize("the folder", total, limits.max_unpacked_bytes, sizeWords);
      status.replaceChildren(h("p", {}, `Packing ${kept.length} files (${sizeWords(total)})…`));
      const blob = await packFolder(byPath, kept);
      const files_ = `${kept.length} ${kept.length === 1 ? "file" : "files"}: ${kept.map((f) => f.path).slice(0, 20).join(", ")}${kept.length > 20 ? ", …" : ""}`;
      await send(blob, "the folder", [files_, left.length ? `Left out (${left.length}): ${left.slice(0, 20).join(", ")}${left.length > 20 ? ", …" : ""}` : ""].filter(Boolean), mine);
    });
  });
  archive.addEventListener("change", () => {
    folder.value = "";
    const file = archive.files?.[0];
    if (!file) return;
    run(async (mine) => {
      archiveKind(file.name, new Uint8Array(await file.slice(0, 512).arrayBuffer()));
      await send(file, file.name, [], mine);
    });
  });
  clear.addEventListener("click", () => {
    generation++;
    working = false;
    reset();
    progress.hidden = true;
    status.replaceChildren(h("p", {}, "No source: the method runs without your files."));
    folder.focus();
  });

  const element = h(
    "fieldset",
    { class: "source" },
    h("legend", {}, "Source (optional)"),
    h(
      "p",
      { id: "s-source-help", class: "help" },
      `A folder (packed here into a .tar.gz) or a ${limits.formats.map((f) => `.${f}`).join(" or ")} archive, at most ${sizeWords(limits.max_bytes)} compressed and ${sizeWords(limits.max_unpacked_bytes)} unpacked. `,
      `Left out of a folder, as tp submit does: ${ALWAYS_LEFT_OUT.join(" ")} and what its .gitignore names; files that look like secrets are refused.`,
    ),
    h("div", { class: "field" }, h("label", { for: "s-folder" }, "Folder"), folder),
    h("div", { class: "field" }, h("label", { for: "s-archive" }, "Archive (.tar.gz or .tar)"), archive),
    progress,
    status,
    clear,
  );
  return { element, value: () => chosen, busy: () => working };
}
