// Tags grouped by prefix (`train/`, `eval/`, `sys/`, …) and filtered by what the user types.
export interface TagGroup {
  group: string; // the prefix without its slash; "" for tags without one
  tags: string[];
}

const FIRST = ["train", "eval", "sys"];

export function prefixOf(tag: string): string {
  const i = tag.indexOf("/");
  return i > 0 ? tag.slice(0, i) : "";
}

// Every whitespace-separated word of ``filter`` must appear in the tag (case-insensitive).
export function matches(tag: string, filter: string): boolean {
  const words = filter.toLowerCase().split(/\s+/).filter(Boolean);
  const t = tag.toLowerCase();
  return words.every((w) => t.includes(w));
}

// The groups in order: train, eval, sys, the others by name, then tags without a prefix; tags by
// name within a group; duplicates once.
export function groupTags(tags: Iterable<string>, filter = ""): TagGroup[] {
  const groups = new Map<string, Set<string>>();
  for (const tag of tags) {
    if (!matches(tag, filter)) continue;
    const g = prefixOf(tag);
    if (!groups.has(g)) groups.set(g, new Set());
    groups.get(g)!.add(tag);
  }
  const rank = (g: string): [number, string] => [g === "" ? FIRST.length + 1 : FIRST.includes(g) ? FIRST.indexOf(g) : FIRST.length, g];
  return [...groups.entries()]
    .sort(([a], [b]) => {
      const [ra, na] = rank(a);
      const [rb, nb] = rank(b);
      return ra - rb || (na < nb ? -1 : na > nb ? 1 : 0);
    })
    .map(([group, set]) => ({ group, tags: [...set].sort() }));
}
