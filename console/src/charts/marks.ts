// NaN and ±∞ drawn on a uPlot canvas: ▲ +∞ at the top, ▼ −∞ at the bottom, × NaN on the line
// where it broke (the last finite value before it; the middle when there is none).
import type uPlot from "uplot";
import type { Columns } from "./model";

export interface MarkedRun {
  colour: string;
  faded: boolean; // another run is highlighted
  marks: Columns["marks"];
}

export function drawMarks(u: uPlot, runs: ReadonlyArray<MarkedRun>, logY: boolean): void {
  const ctx = u.ctx;
  const r = devicePixelRatio || 1;
  const { left, top, width: w, height: ht } = u.bbox;
  const s = 5 * r;
  ctx.save();
  ctx.lineWidth = 2 * r;
  for (const run of runs) {
    ctx.strokeStyle = run.colour;
    ctx.fillStyle = run.colour;
    ctx.globalAlpha = run.faded ? 0.2 : 1;
    for (const m of run.marks) {
      const x = u.valToPos(m.x, "x", true);
      if (x < left || x > left + w) continue;
      ctx.beginPath();
      if (m.kind === "+inf" || m.kind === "-inf") {
        const edge = m.kind === "+inf" ? top + 1 : top + ht - 1;
        const base = m.kind === "+inf" ? edge + 1.6 * s : edge - 1.6 * s;
        ctx.moveTo(x, edge);
        ctx.lineTo(x - s, base);
        ctx.lineTo(x + s, base);
        ctx.fill();
      } else {
        const yv = m.at === null || (logY && m.at <= 0) ? null : u.valToPos(m.at, "y", true);
        const y = yv === null || !Number.isFinite(yv) ? top + ht / 2 : Math.min(top + ht - s, Math.max(top + s, yv));
        ctx.moveTo(x - s, y - s);
        ctx.lineTo(x + s, y + s);
        ctx.moveTo(x + s, y - s);
        ctx.lineTo(x - s, y + s);
        ctx.stroke();
      }
    }
  }
  ctx.restore();
}
