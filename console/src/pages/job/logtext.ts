// The log's text: a bounded buffer of lines and the search over them (pure: no DOM,
// unit-tested in console/test/logtext.test.ts). The view (log.ts) draws what these decide.

export const MAX_LINES = 5_000; // lines kept in the page; older ones are dropped (and said so)

export interface Pushed {
  added: string[]; // complete lines to append (those of this chunk that are kept)
  partial: string; // the unfinished last line now ("" when the text ended with a newline)
  removeOld: number; // lines shown before this push to remove from the top
}

export const MAX_LINE = 16_384; // characters of one line kept; the rest is counted, not kept

// What a line keeps: its first MAX_LINE characters, then how many were not kept.
function clipped(line: string, cut: number): string {
  const over = Math.max(0, line.length - MAX_LINE) + cut;
  return over ? `${line.slice(0, MAX_LINE)}… (${over} more characters not shown)` : line;
}

// The last `max` lines of a log that arrives in chunks cut anywhere, each at most MAX_LINE
// characters: a log that never writes a newline, or one huge line, stays bounded too.
export class LineBuffer {
  lines: string[] = [];
  partial = "";
  dropped = 0; // every line dropped so far
  private cut = 0; // characters of the unfinished line not kept

  constructor(readonly max = MAX_LINES) {}

  push(chunk: string): Pushed {
    const parts = (this.partial + chunk).split("\n");
    const rest = parts.pop() ?? "";
    const done = parts.map((line, i) => clipped(line, i === 0 ? this.cut : 0));
    if (parts.length) this.cut = 0; // the unfinished line ended: the next one starts whole
    this.cut += Math.max(0, rest.length - MAX_LINE);
    this.partial = rest.slice(0, MAX_LINE);
    this.lines.push(...done);
    const over = Math.max(0, this.lines.length - this.max);
    if (over) this.lines.splice(0, over);
    this.dropped += over;
    const kept = Math.min(done.length, this.max);
    const partial = this.cut ? clipped(this.partial, this.cut) : this.partial;
    return { added: done.slice(done.length - kept), partial, removeOld: over - (done.length - kept) };
  }
}

export type Range = [number, number]; // [start, end) within one line

export type Matcher = { find: (line: string) => Range[] } | { error: string };

// Case-insensitive: a substring, or a regular expression (JavaScript's syntax) when `regex`.
export function matcher(query: string, regex: boolean): Matcher | null {
  if (!query) return null;
  if (!regex) {
    const q = query.toLowerCase();
    return {
      find: (line) => {
        const out: Range[] = [];
        const low = line.toLowerCase();
        for (let at = low.indexOf(q); at >= 0; at = low.indexOf(q, at + q.length)) out.push([at, at + q.length]);
        return out;
      },
    };
  }
  let re: RegExp;
  try {
    re = new RegExp(query, "gi");
  } catch (err) {
    return { error: `Not a valid regular expression: ${err instanceof Error ? err.message : String(err)}. Fix the pattern, or untick "Regular expression" to search for the text as typed.` };
  }
  return {
    find: (line) => {
      const out: Range[] = [];
      re.lastIndex = 0;
      for (let m = re.exec(line); m; m = re.exec(line)) {
        if (m[0].length === 0) {
          re.lastIndex++; // an empty match (e.g. "a*") marks nothing; move on
          if (re.lastIndex > line.length) break;
          continue;
        }
        out.push([m.index, m.index + m[0].length]);
      }
      return out;
    },
  };
}

// The line cut into plain and marked pieces, in order.
export function pieces(line: string, ranges: Range[]): { text: string; mark: boolean }[] {
  const out: { text: string; mark: boolean }[] = [];
  let at = 0;
  for (const [s, e] of ranges) {
    if (s > at) out.push({ text: line.slice(at, s), mark: false });
    out.push({ text: line.slice(s, e), mark: true });
    at = e;
  }
  if (at < line.length || !out.length) out.push({ text: line.slice(at), mark: false });
  return out;
}

// "3 of 17", "17 matches", "No matches".
export function countWords(current: number, total: number): string {
  if (!total) return "No matches";
  return current >= 0 ? `${current + 1} of ${total}` : `${total} match${total === 1 ? "" : "es"}`;
}
