import { api, must, type Schemas } from "../api";
import { h, table } from "../dom";

export type Series = Schemas["SeriesOut"];

const LIMIT = 100; // raw points per request (the API allows up to 5,000)

const distinct = <T>(values: T[]): T[] => [...new Set(values)].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));

// The raw scalar inspector: pick attempt, member, source and tag (from the series the job
// reported), and read the points exactly as logged, LIMIT at a time, in step order.
export function rawInspector(jobId: string, series: Series[]): HTMLElement {
  const section = h("section", { "aria-labelledby": "raw-title" }, h("h2", { id: "raw-title" }, "Raw scalars"));
  if (!series.length) {
    section.append(h("p", {}, "No series reported yet."));
    return section;
  }
  const select = (id: string, label: string, values: (string | number)[]): [HTMLElement, HTMLSelectElement] => {
    const el = h("select", { id, name: id }, ...values.map((v) => h("option", { value: String(v) }, String(v))));
    return [h("div", { class: "field" }, h("label", { for: id }, label), el), el];
  };
  const [attemptBox, attempt] = select("raw-attempt", "Attempt", distinct(series.map((s) => s.attempt)));
  const [memberBox, member] = select("raw-member", "Member", distinct(series.map((s) => s.member)));
  const [sourceBox, source] = select("raw-source", "Source", distinct(series.map((s) => s.source)));
  const [tagBox, tag] = select("raw-tag", "Tag", distinct(series.map((s) => s.tag)));
  const start = h("input", { id: "raw-start", name: "start", type: "number", min: 0, value: 0, inputmode: "numeric" });
  const out = h("div", { "aria-live": "polite" });
  const form = h(
    "form",
    { class: "filters", "aria-label": "Pick a series" },
    attemptBox, memberBox, sourceBox, tagBox,
    h("div", { class: "field" }, h("label", { for: "raw-start" }, "From step"), start),
    h("button", { type: "submit" }, "Show raw points"),
  );
  const show = async (from: number, after: number): Promise<void> => {
    const picked = series.find(
      (s) => String(s.attempt) === attempt.value && String(s.member) === member.value && s.source === source.value && s.tag === tag.value,
    );
    if (!picked) {
      out.replaceChildren(h("p", { role: "alert", class: "error" }, `No series ${tag.value} for attempt ${attempt.value}, member ${member.value}, source ${source.value}: pick another combination.`));
      return;
    }
    const query = { attempt: picked.attempt, member: picked.member, source: picked.source, tag: picked.tag, start: from, after_offset: after, limit: LIMIT };
    const raw = await must(api.GET("/v1/jobs/{job_id}/metrics/raw", { params: { path: { job_id: jobId }, query } }));
    const caption = `Raw points of ${picked.tag} (attempt ${picked.attempt}, member ${picked.member}, ${picked.source}) from step ${raw.points.length ? raw.points[0].step : from}`;
    const more = raw.next_start !== null && raw.next_after_offset !== null;
    const next = h("button", { type: "button" }, "Next raw points");
    next.addEventListener("click", () => void show(raw.next_start!, raw.next_after_offset!));
    out.replaceChildren(
      raw.points.length
        ? table(caption, ["Step", "Value", "Wall time", "Record offset"], raw.points.map((p) => [p.step, p.value, new Date(p.wall_time * 1000).toISOString(), p.offset]))
        : h("p", {}, "No points in that range."),
      h("p", { class: "muted" }, `${picked.count} points in this series, steps ${picked.first_step}–${picked.last_step}; ${LIMIT} shown at a time.`),
      more ? next : "",
    );
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    show(Math.max(0, Number(start.value) || 0), -1).catch((err: unknown) => {
      out.replaceChildren(h("p", { role: "alert", class: "error" }, err instanceof Error ? err.message : String(err)));
    });
  });
  section.append(form, out);
  return section;
}
