import { describe as suite, expect, it } from "vitest";
import { describe, segments, usage, WINDOW_MS } from "../src/pages/fleet-view";

const NOW = Date.parse("2026-01-02T12:00:00Z");
const ago = (hours: number): string => new Date(NOW - hours * 3_600_000).toISOString();

suite("usage", () => {
  it("says used of total with a share, and none without capacity", () => {
    expect(usage(2, 8)).toBe("2 of 8 reserved (25%)");
    expect(usage(0.5, 4)).toBe("0.5 of 4 reserved (13%)");
    expect(usage(0, 0)).toBe("none");
  });
});

suite("segments", () => {
  it("covers its oldest change (at most 24 h back) to now, oldest first", () => {
    const segs = segments([{ at: ago(1), connectivity: "connected" }, { at: ago(2), connectivity: "disconnected" }, { at: ago(6), connectivity: "connected" }], NOW);
    expect(segs.map((s) => s.connectivity)).toEqual(["connected", "disconnected", "connected"]);
    expect(segs[0].from).toBe(NOW - 6 * 3_600_000);
    expect(segs.reduce((a, s) => a + s.share, 0)).toBeCloseTo(1);
    expect(segs[1].share).toBeCloseTo(1 / 6);
  });
  it("clips a change older than the window to its start", () => {
    const segs = segments([{ at: ago(3), connectivity: "lost" }, { at: ago(48), connectivity: "connected" }], NOW);
    expect(segs.map((s) => [s.connectivity, s.from])).toEqual([
      ["connected", NOW - WINDOW_MS],
      ["lost", NOW - 3 * 3_600_000],
    ]);
  });
  it("is unknown without changes, and ignores bad or future times", () => {
    const bad = [{ at: "nonsense", connectivity: "connected" }, { at: ago(-1), connectivity: "lost" }];
    expect(segments(bad, NOW)).toEqual([{ connectivity: "unknown", from: NOW - WINDOW_MS, to: NOW, share: 1 }]);
  });
  it("merges repeats, and describes each segment with its times", () => {
    const segs = segments([{ at: ago(1), connectivity: "connected" }, { at: ago(30), connectivity: "connected" }], NOW);
    expect(segs).toHaveLength(1);
    expect(describe(segs, (ms) => new Date(ms).toISOString().slice(11, 16))).toBe("connected from 12:00 to 12:00");
    expect(describe([], String)).toBe("nothing known");
  });
});
