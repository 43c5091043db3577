import { describe, expect, it } from "vitest";
import type { Schemas } from "../src/api";
import { COMPARE_MAX, compareHref, duration, formatDuration, parseSelection, position, resources, toggle } from "../src/pages/jobs-view";

type Job = Schemas["JobOut"];
type Progress = Schemas["JobProgressOut"];

const T = Date.parse("2026-01-01T12:00:00Z");
const iso = (minutes: number): string => new Date(T + minutes * 60_000).toISOString();
const progress = (p: Partial<Progress>): Progress => ({ attempts: 1, started_at: null, ended_at: null, pending_since: null, queue_position: null, ...p });
const job = (over: Partial<Job>): Job =>
  ({ id: "job-1", state: "running", gpus: 0, cpus: 1, updated_at: iso(0), created_at: iso(0), progress: null, ...over }) as Job;

describe("formatDuration", () => {
  it("writes two units at most, never negative", () => {
    expect(formatDuration(0)).toBe("0 s");
    expect(formatDuration(-5000)).toBe("0 s");
    expect(formatDuration(4_999)).toBe("4 s");
    expect(formatDuration(12 * 60_000 + 5_000)).toBe("12 min 5 s");
    expect(formatDuration(3 * 3_600_000 + 2 * 60_000 + 9_000)).toBe("3 h 2 min");
    expect(formatDuration(3 * 3_600_000 + 9_000)).toBe("3 h");
    expect(formatDuration(2 * 86_400_000 + 4 * 3_600_000)).toBe("2 d 4 h");
  });
});

describe("duration", () => {
  it("counts a running job from its first start, live", () => {
    const d = duration(job({ state: "running", progress: progress({ started_at: iso(-5) }) }), T);
    expect(d.text).toBe("running 5 min");
    expect(d.since).toBe(iso(-5));
  });
  it("gives an ended job start to end, not live", () => {
    const d = duration(job({ state: "succeeded", progress: progress({ started_at: iso(-10), ended_at: iso(-4) }) }), T);
    expect([d.text, d.since]).toEqual(["ran 6 min", null]);
    const never = duration(job({ state: "cancelled", progress: progress({ ended_at: iso(-1) }) }), T);
    expect(never.text).toBe("never ran");
  });
  it("counts a pending job from when it last entered pending", () => {
    const d = duration(job({ state: "pending", progress: progress({ pending_since: iso(-2), started_at: iso(-9) }) }), T);
    expect([d.text, d.since]).toEqual(["waiting 2 min", iso(-2)]);
  });
  it("says nothing without progress (a single job's answer)", () => {
    expect(duration(job({}), T).text).toBe("");
  });
});

describe("resources and position", () => {
  it("names GPUs, or CPUs for a CPU job", () => {
    expect(resources(job({ gpus: 8 }))).toBe("8 GPUs");
    expect(resources(job({ gpus: 1 }))).toBe("1 GPU");
    expect(resources(job({ cpus: 2 }))).toBe("2 CPUs");
    expect(resources(job({ cpus: 0.5 }))).toBe("0.5 CPUs");
  });
  it("gives a pending job's rank among all pending", () => {
    expect(position(job({ progress: progress({ queue_position: 3 }) }), 12)).toBe("3 of 12");
    expect(position(job({ progress: progress({}) }), 12)).toBe("");
  });
});

describe("selection", () => {
  it("keeps order, drops repeats and junk, and stops at the limit", () => {
    expect(parseSelection('["a","b","a",3,""]')).toEqual(["a", "b"]);
    expect(parseSelection("not json")).toEqual([]);
    expect(parseSelection('{"a":1}')).toEqual([]);
    const many = Array.from({ length: 30 }, (_, i) => `job-${i}`);
    expect(parseSelection(JSON.stringify(many))).toHaveLength(COMPARE_MAX);
    const full = many.slice(0, COMPARE_MAX);
    expect(toggle(full, "job-99", true)).toEqual(full); // refused at the limit
    expect(toggle(full, "job-0", false)).toHaveLength(COMPARE_MAX - 1);
    expect(toggle(["a"], "b", true)).toEqual(["a", "b"]);
  });
  it("links the compare view with the ids in the order picked", () => {
    expect(compareHref(["job-b", "job-a"])).toBe("#/compare?jobs=job-b,job-a");
    expect(compareHref(["a,b"])).toBe("#/compare?jobs=a%2Cb");
  });
});
