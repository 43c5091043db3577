// What the Artifacts section says besides its table (pure: unit-tested in
// console/test/artifactwords.test.ts). Files are recorded (a manifest) when a member exits 0 on
// a backend that records outputs (docs/capsule.md#artifacts): the page says which case it is,
// never "none recorded" for a member that completed with a manifest of no files.

export interface Recorded {
  attempt: number;
  member: number;
  files: unknown[];
}

export interface JobMembers {
  state: string;
  backend: string;
  attempts: { number: number; members: { index: number; state: string; exit_code: number | null; reason: string | null }[] }[];
}

const ENDED = new Set(["succeeded", "failed", "cancelled"]);

export function artifactNotes(job: JobMembers, records: Recorded[], recordsOutputs: boolean): string[] {
  if (!recordsOutputs) return [`This job's backend (${job.backend}) records no output files: its members get no $TUNEPLANE_OUTPUT_DIR.`];
  const notes: string[] = [];
  const byKey = new Map(records.map((r) => [`${r.attempt}/${r.member}`, r]));
  let completed = 0;
  for (const a of job.attempts) {
    for (const m of a.members) {
      if (m.state !== "succeeded") continue;
      completed++;
      const r = byKey.get(`${a.number}/${m.index}`);
      const who = `Attempt ${a.number} member ${m.index}`;
      if (r && !r.files.length) notes.push(`${who} completed and left no files in its output directory ($TUNEPLANE_OUTPUT_DIR).`);
      else if (!r) {
        if (m.exit_code !== null && m.exit_code !== 0) notes.push(`${who} completed without a recorded manifest (it exited with code ${m.exit_code}${m.reason ? `: ${m.reason}` : ""}): files are recorded when a member exits 0.`);
        else notes.push(`${who} completed, but no manifest of its output directory was recorded: the directory was missing or could not be read, or held more than 10,000 files (\`tp artifacts verify\` and the member's log say more).`);
      }
    }
  }
  if (!records.length && !completed) {
    notes.push(ENDED.has(job.state) ? "No output files: they are recorded when a member exits 0, and none of this job's did." : "No output files yet: each member's are recorded when it exits 0.");
  }
  return notes;
}
