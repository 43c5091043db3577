// The preview's resolution in words, first: where it runs, on what, with which runtime, how
// long it may wait and what happens when it fails. Pure (no DOM): unit-tested in
// console/test/submit-words.test.ts.
import type { Schemas } from "../api";

type Summary = Schemas["PreviewSummaryOut"];
type Role = Schemas["RoleSummaryOut"];
type Placement = Schemas["PlacementOut"];
type Wait = Schemas["WaitOut"];

const plural = (n: number, one: string, many = `${one}s`): string => `${n} ${n === 1 ? one : many}`;

function num(n: number): string {
  return Number.isInteger(n) ? String(n) : String(Number(n.toFixed(3)));
}

// "8 H200 GPUs" for a GPU member, "2 CPUs" for a CPU one: a CPU job never says GPU.
export function perMember(role: Role): string {
  if (role.gpus > 0) {
    const model = role.gpu_model ? `${role.gpu_model.toUpperCase()} ` : "";
    return `${role.gpus} ${model}${role.gpus === 1 ? "GPU" : "GPUs"}`;
  }
  return `${num(role.cpus)} ${role.cpus === 1 ? "CPU" : "CPUs"}`;
}

export function isGpu(summary: Summary): boolean {
  return summary.roles.some((r) => r.gpus > 0);
}

// "2 members × 8 H200 GPUs in pool a (fleet f)"; one member: "8 H200 GPUs in pool a (fleet f)".
export function roleWords(role: Role, placement: Placement | undefined): string {
  const lead = role.members === 1 ? perMember(role) : `${role.members} members × ${perMember(role)}`;
  const fleet = placement?.fleet ? ` (fleet ${placement.fleet})` : "";
  return `${lead} in pool ${placement?.pool ?? role.pool}${fleet}`;
}

export function digestShort(digest: string): string {
  const [algo, hex = ""] = digest.split(":", 2);
  return hex ? `${algo}:${hex.slice(0, 12)}…` : digest;
}

export function runtimeWords(summary: Summary): string {
  const r = summary.runtime;
  return `${r.name} (${r.image}${r.digest ? `@${digestShort(r.digest)}` : ""})`;
}

export function waitWords(wait: Wait | null): string {
  if (!wait) return "unknown (the estimate could not be computed)";
  if (wait.starts_now) return "none: it would start at once";
  const where = `position ${wait.position} of ${wait.pending_total} pending`;
  if (wait.ahead === 0) return `would wait, first in line (${where}): ${wait.text}`;
  return `would wait behind ${plural(wait.ahead, "job")} (${where}): ${wait.text}`;
}

export function sizeWords(bytes: number): string {
  if (bytes < 1024) return plural(bytes, "byte");
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  if (bytes < 1024 ** 3) return `${(bytes / 1024 ** 2).toFixed(1)} MiB`;
  return `${(bytes / 1024 ** 3).toFixed(1)} GiB`;
}

// The whole resolution as one sentence, in the order a user checks it.
export function summarySentence(summary: Summary, wait: Wait | null): string {
  const byRole = new Map((wait?.placements ?? []).map((p) => [p.role, p]));
  const several = summary.roles.length > 1;
  const roles = summary.roles.map((r) => `${several ? `${r.name}: ` : ""}${roleWords(r, byRole.get(r.name))}`).join("; ");
  const parts = [
    `${roles}, ${summary.backend} backend`,
    `runtime ${runtimeWords(summary)}`,
    `queue ${summary.queue}`,
    `estimated wait: ${waitWords(wait)}`,
    `retry: ${summary.retry}`,
  ];
  if (summary.source) parts.push(`source ${digestShort(summary.source.digest)} (${sizeWords(summary.source.size)})`);
  if (summary.env.length) parts.push(`env ${summary.env.join(", ")}`);
  if (summary.plugins.length) parts.push(`plugins ${summary.plugins.map((p) => `${p.name} ${p.version}`).join(", ")}`);
  return `${parts.join("; ")}.`;
}
