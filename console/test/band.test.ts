import { describe, expect, it } from "vitest";
import { band, duration, MIN_WIDTH } from "../src/pages/job/band";

const at = (s: number) => new Date(Date.UTC(2026, 0, 1, 12, 0, s)).toISOString();
const iso = (x: string) => x.slice(11, 19);

describe("band", () => {
  it("lays two attempts on one axis with how each ended and the backoff between them", () => {
    const { segments } = band(
      [
        { number: 2, state: "succeeded", end: "", reason: null, created_at: at(70), updated_at: at(100) },
        { number: 1, state: "failed", end: "node-lost", reason: "node n1 lost", created_at: at(0), updated_at: at(40) },
      ],
      Date.parse(at(500)),
      iso,
    );
    expect(segments.map((s) => [s.number, s.outcome, s.left, s.width, s.gapAfter])).toEqual([
      [1, "node-lost", 0, 40, 30_000],
      [2, "succeeded", 70, 30, null],
    ]);
    expect(segments[0].words).toBe("Attempt 1: 12:00:00 to 12:00:40 (40 s), ended node-lost: node n1 lost; attempt 2 started 30 s later, at 12:01:10.");
    expect(segments[1].words).toBe("Attempt 2: 12:01:10 to 12:01:40 (30 s), ended succeeded.");
  });

  it("runs a live attempt up to now, and keeps a short one visible", () => {
    const { segments } = band(
      [
        { number: 1, state: "failed", end: "preempted", reason: null, created_at: at(0), updated_at: at(0) },
        { number: 2, state: "running", end: "", reason: null, created_at: at(10), updated_at: at(10) },
      ],
      Date.parse(at(1000)),
      iso,
    );
    expect(segments[1].live).toBe(true);
    expect(segments[1].stop).toBe(Date.parse(at(1000)));
    expect(segments[1].outcome).toBe("running");
    expect(segments[0].width).toBe(MIN_WIDTH);
    expect(segments[1].words).toContain("running since 12:00:10 (16 min 30 s so far)");
    for (const s of segments) expect(s.left + s.width).toBeLessThanOrEqual(100);
  });

  it("has nothing to draw without attempts", () => {
    expect(band([], 0, iso).segments).toEqual([]);
  });
});

describe("duration", () => {
  it("says seconds, minutes and hours", () => {
    expect([duration(0), duration(59_400), duration(125_000), duration(3_780_000), duration(-5)]).toEqual(["0 s", "59 s", "2 min 5 s", "1 h 3 min", "0 s"]);
  });
});
