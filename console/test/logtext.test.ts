import { describe, expect, it } from "vitest";
import { countWords, LineBuffer, matcher, pieces, MAX_LINE } from "../src/pages/job/logtext";

describe("LineBuffer", () => {
  it("joins lines cut across chunks", () => {
    const b = new LineBuffer(10);
    expect(b.push("hel")).toEqual({ added: [], partial: "hel", removeOld: 0 });
    expect(b.push("lo\nwor")).toEqual({ added: ["hello"], partial: "wor", removeOld: 0 });
    expect(b.push("ld\n")).toEqual({ added: ["world"], partial: "", removeOld: 0 });
    expect(b.lines).toEqual(["hello", "world"]);
  });

  it("keeps the last lines and counts those dropped", () => {
    const b = new LineBuffer(3);
    b.push("1\n2\n");
    expect(b.push("3\n4\n5\n")).toEqual({ added: ["3", "4", "5"], partial: "", removeOld: 2 });
    expect(b.lines).toEqual(["3", "4", "5"]);
    // a chunk longer than the buffer: only its last lines are drawn, and every old one goes
    expect(b.push("a\nb\nc\nd\ne\n")).toEqual({ added: ["c", "d", "e"], partial: "", removeOld: 3 });
    expect(b.dropped).toBe(7);
  });
});

describe("matcher", () => {
  it("finds a substring whatever its case", () => {
    const m = matcher("LoSs", false);
    expect(m && "find" in m && m.find("loss=1 LOSS=2 los")).toEqual([[0, 4], [7, 11]]);
  });

  it("finds a regular expression, and never loops on an empty match", () => {
    const m = matcher("step \\d+|x*", true);
    expect(m && "find" in m && m.find("step 12, step 3")).toEqual([[0, 7], [9, 15]]);
  });

  it("says what is wrong with a bad regular expression, and the fix", () => {
    const m = matcher("(unclosed", true);
    expect(m && "error" in m && m.error).toMatch(/^Not a valid regular expression: .*untick "Regular expression"/);
  });

  it("takes special characters literally without regex", () => {
    const m = matcher("a.b(", false);
    expect(m && "find" in m && m.find("axb( a.b(")).toEqual([[5, 9]]);
    expect(matcher("", true)).toBeNull();
  });
});

describe("pieces and count", () => {
  it("cuts a line into plain and marked text", () => {
    expect(pieces("a loss b", [[2, 6]])).toEqual([{ text: "a ", mark: false }, { text: "loss", mark: true }, { text: " b", mark: false }]);
    expect(pieces("", [])).toEqual([{ text: "", mark: false }]);
  });

  it("counts in words", () => {
    expect([countWords(2, 17), countWords(-1, 1), countWords(-1, 4), countWords(-1, 0)]).toEqual(["3 of 17", "1 match", "4 matches", "No matches"]);
  });
});

describe("LineBuffer keeps every line bounded", () => {
  it("cuts a huge line and says how much was not kept", () => {
    const b = new LineBuffer(10);
    const pushed = b.push("x".repeat(MAX_LINE + 5) + "\nok\n");
    expect(pushed.added).toEqual([`${"x".repeat(MAX_LINE)}… (5 more characters not shown)`, "ok"]);
  });

  it("bounds a log that never writes a newline, counting across chunks", () => {
    const b = new LineBuffer(10);
    for (let i = 0; i < 10; i++) b.push("y".repeat(MAX_LINE));
    expect(b.partial.length).toBe(MAX_LINE);
    const last = b.push("z\nnext");
    expect(last.added).toEqual([`${"y".repeat(MAX_LINE)}… (${9 * MAX_LINE + 1} more characters not shown)`]);
    expect(last.partial).toBe("next"); // the next line starts whole
  });

  it("says the unfinished line was cut while it is still arriving", () => {
    const b = new LineBuffer(10);
    const pushed = b.push("w".repeat(MAX_LINE + 3));
    expect(pushed.partial).toBe(`${"w".repeat(MAX_LINE)}… (3 more characters not shown)`);
  });
});
