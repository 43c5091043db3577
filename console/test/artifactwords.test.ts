import { describe, expect, it } from "vitest";
import { artifactNotes } from "../src/pages/job/artifactwords";

const job = (state: string, members: { index: number; state: string; exit_code?: number | null; reason?: string | null }[]) => ({
  state,
  backend: "local",
  attempts: [{ number: 1, members: members.map((m) => ({ exit_code: 0, reason: null, ...m })) }],
});

describe("artifactNotes", () => {
  it("says nothing more when every completed member's files are listed", () => {
    expect(artifactNotes(job("succeeded", [{ index: 0, state: "succeeded" }]), [{ attempt: 1, member: 0, files: [{}] }], true)).toEqual([]);
  });

  it("says a completed member left no files, rather than that none were recorded", () => {
    expect(artifactNotes(job("succeeded", [{ index: 0, state: "succeeded" }]), [{ attempt: 1, member: 0, files: [] }], true)).toEqual([
      "Attempt 1 member 0 completed and left no files in its output directory ($TUNEPLANE_OUTPUT_DIR).",
    ]);
  });

  it("names a backend that records no outputs", () => {
    const k = { ...job("succeeded", [{ index: 0, state: "succeeded" }]), backend: "kubernetes" };
    expect(artifactNotes(k, [], false)).toEqual(["This job's backend (kubernetes) records no output files: its members get no $TUNEPLANE_OUTPUT_DIR."]);
  });

  it("explains a member counted as completed that did not exit 0 (a Ray worker stopped after its driver)", () => {
    const notes = artifactNotes(job("succeeded", [{ index: 1, state: "succeeded", exit_code: 137, reason: "stopped: the driver succeeded" }]), [], true);
    expect(notes).toEqual(["Attempt 1 member 1 completed without a recorded manifest (it exited with code 137: stopped: the driver succeeded): files are recorded when a member exits 0."]);
  });

  it("says a member that exited 0 without a manifest had an unreadable directory", () => {
    const notes = artifactNotes(job("succeeded", [{ index: 0, state: "succeeded" }]), [], true);
    expect(notes).toEqual(["Attempt 1 member 0 completed, but no manifest of its output directory was recorded: the directory was missing or could not be read, or held more than 10,000 files (`tp artifacts verify` and the member's log say more)."]);
  });

  it("says why there are none yet, or none at all", () => {
    expect(artifactNotes(job("running", [{ index: 0, state: "running" }]), [], true)).toEqual(["No output files yet: each member's are recorded when it exits 0."]);
    expect(artifactNotes(job("failed", [{ index: 0, state: "failed", exit_code: 1 }]), [], true)).toEqual(["No output files: they are recorded when a member exits 0, and none of this job's did."]);
  });
});
