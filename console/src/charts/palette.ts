// Series colours come from the theme (charts.css: --series-0 … --series-11, a light and a dark
// set); this module holds the contrast maths the palette is checked with (WCAG 2: 3:1 for
// graphics against the chart's --surface).
export const SERIES = 12;

function channel(c: number): number {
  const s = c / 255;
  return s <= 0.03928 ? s / 12.92 : Math.pow((s + 0.055) / 1.055, 2.4);
}

export function luminance(hex: string): number {
  const m = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(hex.trim());
  if (!m) throw new Error(`not a #rrggbb colour: ${hex}`);
  const [r, g, b] = [m[1], m[2], m[3]].map((x) => channel(parseInt(x, 16)));
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}

export function contrast(a: string, b: string): number {
  const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}

// The n-th run's colour index and whether it is dashed: past the palette, colours repeat dashed.
export function style(n: number): { colour: number; dashed: boolean } {
  return { colour: n % SERIES, dashed: Math.floor(n / SERIES) % 2 === 1 };
}
