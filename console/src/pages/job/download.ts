// Saving an API answer as a file. The token is a header, not a cookie, so a plain link cannot
// carry it: the answer is fetched with it (`call`), kept as a Blob, and saved through an object
// URL (`blob:`) on a link with `download`, which the CSP allows (a download is neither a fetch
// nor a navigation it governs; docs/console.md#security).
import { call } from "../../api";

export async function saveAs(path: string, name: string): Promise<Blob> {
  const res = await call(path);
  const blob = await res.blob();
  const url = URL.createObjectURL(blob);
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  a.hidden = true;
  document.body.append(a);
  a.click();
  a.remove();
  window.setTimeout(() => URL.revokeObjectURL(url), 60_000);
  return blob;
}
