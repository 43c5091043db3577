// The jobs a comparison shows, from `#/compare?jobs=ID,ID,…`: trimmed, empty ones and repeats
// dropped, in the order given, at most MAX_JOBS (the rest are counted, not fetched).
export const MAX_JOBS = 20;

export function parseJobs(param: string | null, max = MAX_JOBS): { jobs: string[]; dropped: number } {
  const seen: string[] = [];
  for (const raw of (param ?? "").split(",")) {
    const id = raw.trim();
    if (id && id.length <= 200 && !/[\u0000-\u001f]/.test(id) && !seen.includes(id)) seen.push(id);
  }
  return { jobs: seen.slice(0, max), dropped: Math.max(0, seen.length - max) };
}
