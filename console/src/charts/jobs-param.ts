// The jobs a comparison shows, from `#/compare?jobs=ID,ID,…`: trimmed, empty ones and repeats
// dropped, in the order given, at most MAX_JOBS (the rest are counted, not fetched).
export const MAX_JOBS = 20;

export function parseJobs(param: string | null, max = MAX_JOBS): { jobs: string[]; dropped: number } {
  const seen = new Set<string>(); // a Set: a link naming thousands of jobs costs no more than linear time
  for (const raw of (param ?? "").split(",")) {
    const id = raw.trim();
    if (id && id.length <= 200 && !/[\u0000-\u001f]/.test(id)) seen.add(id);
  }
  const jobs = [...seen];
  return { jobs: jobs.slice(0, max), dropped: Math.max(0, jobs.length - max) };
}
