// The chart of context tokens per iteration, drawn as inline SVG: one
// point per iteration.completed (its context_tokens), the compaction
// threshold and the model's window as lines, each compaction's and
// prune's drop as a step down between two iterations, and each stuck
// signal as a flag at its iteration. Every point and marker carries data
// attributes (data-kind, data-iteration, data-tokens, ...) saying what it
// stands for, so a test can read the chart.

const NS = "http://www.w3.org/2000/svg";
const W = 1200;
const H = 350;
const PAD = { left: 64, right: 136, top: 34, bottom: 44 };

function svg(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null && v !== false) e.setAttribute(k, String(v));
  }
  if (text !== undefined) e.textContent = String(text);
  return e;
}

function title(node, text) {
  node.append(svg("title", {}, text));
  return node;
}

// nice is a round step for about n ticks over span.
function nice(span, n) {
  const raw = span / Math.max(1, n);
  const mag = 10 ** Math.floor(Math.log10(raw));
  for (const f of [1, 2, 2.5, 5, 10]) if (f * mag >= raw) return f * mag;
  return 10 * mag;
}

const fmt = new Intl.NumberFormat("en-US");

function tick(n) {
  if (n >= 1e6) return `${n / 1e6}M`;
  if (n >= 1e3) return `${n / 1e3}k`;
  return String(n);
}

// drawChart replaces the content of the <svg> el with the chart of model m.
export function drawChart(el, m) {
  const points = m.points;
  const nodes = [];
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const windowTokens = m.limits.context_window || 0;
  const compactAt = m.limits.compact_at || 0;
  let top = Math.max(windowTokens, compactAt, 1);
  for (const p of points) top = Math.max(top, p.tokens);
  for (const d of m.drops) top = Math.max(top, d.before);
  const yStep = nice(top, 7);
  top = Math.ceil((top * 1.04) / yStep) * yStep;
  const y = (v) => PAD.top + plotH - (v / top) * plotH;

  const first = points.length ? points[0].iteration : 1;
  const last = points.length ? points[points.length - 1].iteration : 1;
  const count = Math.max(1, last - first + 1);
  const step = plotW / count;
  const x = (it) => PAD.left + (it - first + 0.5) * step;

  // Task bands: the iterations of each task in turn, shaded alternately.
  const bands = svg("g", { class: "bands" });
  let band = null;
  let shade = 0;
  for (const p of points) {
    if (!band || band.task !== p.task) {
      band = { task: p.task, from: p.iteration, to: p.iteration, shade: shade++ % 2 };
      bands.append(band.rect = svg("rect", { class: `band band-${band.shade}`, "data-kind": "band", "data-task": p.task }));
      bands.append(band.label = svg("text", { class: "band-label" }, p.task));
    }
    band.to = p.iteration;
    const x0 = x(band.from) - step / 2;
    const x1 = x(band.to) + step / 2;
    band.rect.setAttribute("x", x0);
    band.rect.setAttribute("y", PAD.top);
    band.rect.setAttribute("width", Math.max(0, x1 - x0));
    band.rect.setAttribute("height", plotH);
    band.label.setAttribute("x", x0 + 4);
    band.label.setAttribute("y", PAD.top + 14);
    band.label.setAttribute("visibility", x1 - x0 > 26 ? "visible" : "hidden");
  }
  nodes.push(bands);

  // Grid and axes.
  const grid = svg("g", { class: "grid" });
  for (let v = 0; v <= top; v += yStep) {
    grid.append(svg("line", { x1: PAD.left, x2: PAD.left + plotW, y1: y(v), y2: y(v) }));
    grid.append(svg("text", { class: "axis", x: PAD.left - 8, y: y(v) + 5, "text-anchor": "end" }, tick(v)));
  }
  const xStep = Math.max(1, nice(count, 12));
  for (let it = Math.ceil(first / xStep) * xStep; points.length && it <= last; it += xStep) {
    grid.append(svg("text", { class: "axis", x: x(it), y: H - PAD.bottom + 22, "text-anchor": "middle" }, it));
  }
  grid.append(svg("text", { class: "axis-title", x: PAD.left + plotW / 2, y: H - 2, "text-anchor": "middle" }, "iteration"));
  nodes.push(grid);

  // The window and the compaction threshold.
  const limits = svg("g", { class: "limits" });
  if (windowTokens) {
    limits.append(title(svg("line", { class: "window", "data-kind": "window", "data-tokens": windowTokens, x1: PAD.left, x2: PAD.left + plotW, y1: y(windowTokens), y2: y(windowTokens) }),
      `model window: ${fmt.format(windowTokens)} tokens`));
    limits.append(svg("text", { class: "limit-label window-label", x: PAD.left + plotW + 8, y: y(windowTokens) + 5 }, `window ${tick(windowTokens)}`));
  }
  if (compactAt) {
    limits.append(title(svg("line", { class: "compact-at", "data-kind": "threshold", "data-tokens": compactAt, x1: PAD.left, x2: PAD.left + plotW, y1: y(compactAt), y2: y(compactAt) }),
      `compaction threshold: ${fmt.format(compactAt)} tokens`));
    limits.append(svg("text", { class: "limit-label compact-label", x: PAD.left + plotW + 8, y: y(compactAt) + 5 }, `compact ${tick(compactAt)}`));
  }
  nodes.push(limits);

  if (!points.length) {
    nodes.push(svg("text", { class: "empty-chart", x: PAD.left + plotW / 2, y: PAD.top + plotH / 2, "text-anchor": "middle" }, "no iteration yet"));
    el.replaceChildren(...nodes);
    return;
  }

  // Which drops follow which iteration: a drop is drawn between its
  // iteration and the next, where the context went down.
  const dropsAfter = new Map();
  for (const d of m.drops) {
    if (!dropsAfter.has(d.iteration)) dropsAfter.set(d.iteration, []);
    dropsAfter.get(d.iteration).push(d);
  }
  const dropX = (it, i) => Math.min(x(it) + step / 2 + i * 3, PAD.left + plotW);

  // Stuck signals: a flag above the plot and a dashed line down to it.
  const stuck = svg("g", { class: "signals" });
  for (const s of m.signals) {
    const sx = x(s.iteration);
    const g = svg("g", {
      class: `stuck strength-${s.strength || "unknown"}`,
      "data-kind": "stuck",
      "data-iteration": s.iteration,
      "data-pattern": s.pattern,
      "data-action": s.action,
      "data-response": s.response || "",
    });
    g.append(svg("line", { x1: sx, x2: sx, y1: PAD.top - 6, y2: PAD.top + plotH }));
    g.append(svg("path", { d: `M${sx - 9},${PAD.top - 6} L${sx + 9},${PAD.top - 6} L${sx},${PAD.top - 24} Z` }));
    g.append(svg("text", { x: sx, y: PAD.top - 9, "text-anchor": "middle" }, "!"));
    title(g, `iteration ${s.iteration}: stuck (${s.pattern}, ${s.strength || "?"} evidence) → ${s.response || s.action}\n${s.diagnosis}`);
    stuck.append(g);
  }
  nodes.push(stuck);

  // The line: through every point, stepping down where a drop came.
  let d = "";
  for (const p of points) {
    d += `${d ? "L" : "M"}${x(p.iteration).toFixed(1)},${y(p.tokens).toFixed(1)}`;
    (dropsAfter.get(p.iteration) || []).forEach((dr, i) => {
      if (dr.error || dr.after >= dr.before) return;
      const dx = dropX(p.iteration, i).toFixed(1);
      d += `L${dx},${y(dr.before).toFixed(1)}L${dx},${y(dr.after).toFixed(1)}`;
    });
  }
  nodes.push(svg("path", { class: "line", d }));

  // Drops: an arrow from the context before to the context after.
  const drops = svg("g", { class: "drops" });
  for (const [it, list] of dropsAfter) {
    list.forEach((dr, i) => {
      const dx = dropX(it, i);
      const changed = !dr.error && dr.after < dr.before;
      const g = svg("g", {
        class: `drop ${dr.kind}${changed ? "" : " unchanged"}${dr.error ? " failed" : ""}`,
        "data-kind": dr.kind,
        "data-iteration": it,
        "data-before": dr.before,
        "data-after": dr.after,
        "data-error": dr.error ? "true" : "false",
      });
      if (changed) {
        const y0 = y(dr.before);
        const y1 = y(dr.after);
        g.append(svg("line", { x1: dx, x2: dx, y1: y0, y2: y1 - 2 }));
        g.append(svg("path", { d: `M${dx - 6},${y1 - 9} L${dx + 6},${y1 - 9} L${dx},${y1} Z` }));
        // The label sits by the top of the drop, where the line has
        // not come back up to yet.
        g.append(svg("text", { x: dx + 7, y: y0 + 13 }, `−${tick(Math.round((dr.before - dr.after) / 100) * 100)}`));
      } else {
        g.append(svg("circle", { cx: dx, cy: y(dr.before), r: 6 }));
      }
      const what = dr.kind === "prune" ? "prune" : `compaction${dr.tier ? ` (${dr.tier})` : ""}`;
      title(g, dr.error
        ? `after iteration ${it}: ${what} failed: ${dr.error}`
        : `after iteration ${it}: ${what} ${fmt.format(dr.before)} → ${fmt.format(dr.after)} tokens`);
      drops.append(g);
    });
  }
  nodes.push(drops);

  // Points last, on top, each saying which iteration it is.
  const dots = svg("g", { class: "points" });
  const r = step >= 14 ? 5 : step >= 6 ? 3.5 : 2.5;
  for (const p of points) {
    dots.append(title(svg("circle", {
      class: `point${p.compacted ? " compacted" : ""}`,
      "data-kind": "point",
      "data-iteration": p.iteration,
      "data-tokens": p.tokens,
      "data-task": p.task,
      cx: x(p.iteration).toFixed(1),
      cy: y(p.tokens).toFixed(1),
      r,
    }), `iteration ${p.iteration} · task ${p.task} · ${fmt.format(p.tokens)} context tokens${p.compacted ? " (after a compaction)" : ""}`));
  }
  nodes.push(dots);
  el.replaceChildren(...nodes);
}
