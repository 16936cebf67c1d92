// A workflow's graph drawn as SVG, left to right: a small layered layout of its own.
//
// 1. Each node's column is its depth: the longest path to it from a node without parents.
// 2. An edge spanning several columns gets a waypoint in each column it crosses, so that it
//    bends around the nodes there rather than through them.
// 3. Within each column, nodes and waypoints are ordered by the mean position of their
//    neighbours (a few sweeps right and left), which removes most crossings.
// 4. Vertically, each column is placed as close as its order allows to its neighbours (an
//    ordered least-squares fit), so that chains run straight.
// Edges are curves from a parent's right side to a child's left side, ending in an arrowhead;
// `any_end` edges are dashed. Nodes are focusable buttons with a title.

import { h } from "./ui.js";

const SVG = "http://www.w3.org/2000/svg";

/** Node size, gaps between columns and between nodes of a column, waypoint height, margin. */
const W = 176;
const H = 52;
const GAP_X = 72;
const GAP_Y = 20;
const WAY = 10;
const PAD = 12;
/** Characters of a key shown in a node (monospace, 13 px) before it is cut with "…". */
const KEY_CHARS = 19;

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** Depth of every node: 0 without parents, else one more than its deepest parent. Parents that
 *  are not nodes are ignored, and so is an edge closing a cycle (the API refuses both). */
function depths(nodes, byKey) {
  const depth = new Map();
  const visiting = new Set();
  const of = (key) => {
    if (depth.has(key)) return depth.get(key);
    visiting.add(key);
    let d = 0;
    for (const p of byKey.get(key).parents || []) {
      if (!byKey.has(p) || visiting.has(p)) continue;
      d = Math.max(d, of(p) + 1);
    }
    visiting.delete(key);
    depth.set(key, d);
    return d;
  };
  for (const n of nodes) of(n.key);
  return depth;
}

/** Non-decreasing values closest (least squares) to `v`: pool adjacent violators. */
function isotonic(v) {
  const blocks = [];
  for (const x of v) {
    blocks.push({ sum: x, n: 1 });
    while (blocks.length > 1) {
      const b = blocks[blocks.length - 1];
      const a = blocks[blocks.length - 2];
      if (a.sum / a.n <= b.sum / b.n) break;
      a.sum += b.sum;
      a.n += b.n;
      blocks.pop();
    }
  }
  return blocks.flatMap((b) => Array(b.n).fill(b.sum / b.n));
}

/**
 * Positions for `nodes` ([{key, parents, after}]): `{nodes: Map key → {x, y}, edges: [{from, to,
 * after, points}], width, height}`, with `points` the centres of the waypoints between them.
 */
export function layout(nodes) {
  const byKey = new Map(nodes.map((n) => [n.key, n]));
  const depth = depths(nodes, byKey);
  const columns = [];
  const item = new Map(); // id → {id, real, col, size, pred: [], succ: []}
  const add = (id, real, col) => {
    const it = { id, real, col, size: real ? H : WAY, pred: [], succ: [], y: 0 };
    item.set(id, it);
    (columns[col] ||= []).push(it);
    return it;
  };
  // 1. Columns by depth.
  for (const n of nodes) add(n.key, true, depth.get(n.key));
  for (let c = 0; c < columns.length; c++) columns[c] ||= [];
  // 2. Waypoints for long edges.
  const edges = [];
  for (const n of nodes) {
    for (const p of n.parents || []) {
      if (!byKey.has(p) || depth.get(p) >= depth.get(n.key)) continue;
      const chain = [item.get(p)];
      for (let c = depth.get(p) + 1; c < depth.get(n.key); c++) chain.push(add(`${p}\u0000${n.key}\u0000${c}`, false, c));
      chain.push(item.get(n.key));
      for (let i = 1; i < chain.length; i++) {
        chain[i - 1].succ.push(chain[i]);
        chain[i].pred.push(chain[i - 1]);
      }
      edges.push({ from: p, to: n.key, after: n.after || "all_succeeded", chain });
    }
  }
  // 3. Order within columns by the mean index of neighbours, sweeping right then left.
  const index = () => columns.forEach((col) => col.forEach((it, i) => (it.index = i)));
  index();
  const order = (col, side) => {
    const key = new Map(col.map((it) => [it, it[side].length ? it[side].reduce((a, o) => a + o.index, 0) / it[side].length : it.index]));
    col.sort((a, b) => key.get(a) - key.get(b) || a.index - b.index);
    col.forEach((it, i) => (it.index = i));
  };
  for (let round = 0; round < 4; round++) {
    for (let c = 1; c < columns.length; c++) order(columns[c], "pred");
    for (let c = columns.length - 2; c >= 0; c--) order(columns[c], "succ");
  }
  // 4. Vertical places: stacked and centred first, then pulled towards the neighbours.
  const extent = (col) => col.reduce((a, it) => a + it.size, 0) + GAP_Y * Math.max(0, col.length - 1);
  const tallest = Math.max(0, ...columns.map(extent));
  for (const col of columns) {
    let y = (tallest - extent(col)) / 2;
    for (const it of col) {
      it.y = y;
      y += it.size + GAP_Y;
    }
  }
  const centre = (it) => it.y + it.size / 2;
  const place = (col, side) => {
    // Offsets that the order and gaps impose; fit the wanted tops minus them, non-decreasing.
    const offsets = [];
    let off = 0;
    for (const it of col) {
      offsets.push(off);
      off += it.size + GAP_Y;
    }
    const wanted = col.map((it) => {
      const n = it[side];
      const c = n.length ? n.reduce((a, o) => a + centre(o), 0) / n.length : centre(it);
      return c - it.size / 2;
    });
    const fit = isotonic(wanted.map((w, i) => w - offsets[i]));
    col.forEach((it, i) => (it.y = fit[i] + offsets[i]));
  };
  for (let round = 0; round < 6; round++) {
    for (let c = 1; c < columns.length; c++) place(columns[c], "pred");
    for (let c = columns.length - 2; c >= 0; c--) place(columns[c], "succ");
  }
  const all = [...item.values()];
  const top = all.length ? Math.min(...all.map((it) => it.y)) : 0;
  const bottom = all.length ? Math.max(...all.map((it) => it.y + it.size)) : 0;
  const x = (col) => PAD + col * (W + GAP_X);
  const at = new Map();
  for (const it of item.values()) if (it.real) at.set(it.id, { x: x(it.col), y: it.y - top + PAD });
  return {
    nodes: at,
    edges: edges.map((e) => ({
      from: e.from,
      to: e.to,
      after: e.after,
      ways: e.chain.slice(1, -1).map((it) => ({ x: x(it.col), y: centre(it) - top + PAD })),
    })),
    width: PAD * 2 + Math.max(1, columns.length) * W + Math.max(0, columns.length - 1) * GAP_X,
    height: PAD * 2 + bottom - top,
  };
}

/** A curve from (x1, y1) to (x2, y2), leaving and arriving horizontally. */
const curve = (x1, y1, x2, y2) => {
  const dx = Math.max(16, (x2 - x1) / 2);
  return `C ${x1 + dx} ${y1}, ${x2 - dx} ${y2}, ${x2} ${y2}`;
};

/** Spreads `n` ports along a node's side, top to bottom. */
const ports = (y, n) => Array.from({ length: n }, (_, i) => y + (H * (i + 1)) / (n + 1));

const cut = (s, n) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);

/**
 * The graph of `nodes` as an SVG element in a scrolling box.
 * - `describe(node)`: `{line, label, status}`: the node's second line, its accessible name and
 *   title, and its status (a class `s-{status}` colours it), or no status.
 * - `selected`: the key of the node shown as chosen; `onSelect(key)`: called when a node is
 *   clicked or activated with Enter or Space (nodes are then buttons).
 */
export function dag(nodes, { describe, selected = null, onSelect = null, label = "Workflow graph" }) {
  const g = layout(nodes);
  const root = svg("svg", {
    class: "dag",
    width: g.width,
    height: g.height,
    viewBox: `0 0 ${g.width} ${g.height}`,
    role: "group",
    "aria-label": label,
  });
  root.append(
    svg(
      "defs",
      {},
      svg("marker", { id: "dag-arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 9, markerHeight: 9, markerUnits: "userSpaceOnUse", orient: "auto" }, svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "dag-arrow" })),
      svg("pattern", { id: "dag-stripes", width: 8, height: 8, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" }, svg("rect", { width: 4, height: 8, class: "dag-stripe" })),
    ),
  );
  // Ports: edges leave and arrive spread along the sides, in the order of their other end.
  const outs = new Map();
  const ins = new Map();
  for (const e of g.edges) {
    (outs.get(e.from) || outs.set(e.from, []).get(e.from)).push(e);
    (ins.get(e.to) || ins.set(e.to, []).get(e.to)).push(e);
  }
  const firstAfter = (e) => (e.ways.length ? e.ways[0].y : g.nodes.get(e.to).y + H / 2);
  const lastBefore = (e) => (e.ways.length ? e.ways[e.ways.length - 1].y : g.nodes.get(e.from).y + H / 2);
  const start = new Map();
  const end = new Map();
  for (const [key, list] of outs) {
    list.sort((a, b) => firstAfter(a) - firstAfter(b));
    ports(g.nodes.get(key).y, list.length).forEach((y, i) => start.set(list[i], y));
  }
  for (const [key, list] of ins) {
    list.sort((a, b) => lastBefore(a) - lastBefore(b));
    ports(g.nodes.get(key).y, list.length).forEach((y, i) => end.set(list[i], y));
  }
  const edges = svg("g", { class: "dag-edges", "aria-hidden": "true" });
  for (const e of g.edges) {
    const from = g.nodes.get(e.from);
    const to = g.nodes.get(e.to);
    let x = from.x + W;
    let y = start.get(e);
    let d = `M ${x} ${y}`;
    for (const w of e.ways) {
      d += ` ${curve(x, y, w.x, w.y)} L ${w.x + W} ${w.y}`;
      x = w.x + W;
      y = w.y;
    }
    d += ` ${curve(x, y, to.x, end.get(e))}`;
    edges.append(svg("path", { d, class: `dag-edge${e.after === "any_end" ? " any-end" : ""}`, "marker-end": "url(#dag-arrow)", "data-from": e.from, "data-to": e.to }));
  }
  root.append(edges);
  for (const n of nodes) {
    const p = g.nodes.get(n.key);
    const { line, label: name, status } = describe(n);
    const pick = onSelect ? () => onSelect(n.key) : null;
    const node = svg(
      "g",
      {
        class: `dag-node${status ? ` s-${status}` : ""}${n.allow_failure ? " may-fail" : ""}${n.key === selected ? " selected" : ""}`,
        transform: `translate(${p.x} ${p.y})`,
        "data-key": n.key,
        tabindex: 0,
        role: onSelect ? "button" : "img",
        "aria-label": name,
        "aria-pressed": onSelect ? String(n.key === selected) : null,
        onclick: pick,
        onkeydown: pick
          ? (ev) => {
              if (ev.key === "Enter" || ev.key === " ") {
                ev.preventDefault();
                pick();
              }
            }
          : null,
      },
      svg("title", {}, name),
      svg("rect", { class: "ring", x: -4, y: -4, width: W + 8, height: H + 8, rx: 10 }),
      svg("rect", { class: "box", width: W, height: H, rx: 7 }),
      status === "skipped" ? svg("rect", { class: "stripes", width: W, height: H, rx: 7, fill: "url(#dag-stripes)" }) : null,
      svg("text", { class: "key", x: 10, y: 21 }, cut(n.key, KEY_CHARS)),
      svg("text", { class: "line", x: 10, y: 40 }, line),
      n.allow_failure ? svg("text", { class: "tag", x: W - 9, y: 40, "text-anchor": "end" }, "may fail") : null,
    );
    root.append(node);
  }
  return h("div", { class: "dag-wrap" }, root);
}

/** What the shapes of the graph mean; `statuses`: also the colours of these node statuses. */
export function dagLegend(statuses = []) {
  const sample = (cls) => {
    const s = svg("svg", { width: 34, height: 12, "aria-hidden": "true", class: "legend-edge" }, svg("path", { d: "M 1 6 L 33 6", class: `dag-edge${cls}` }));
    return s;
  };
  return h(
    "ul",
    { class: "legend" },
    h("li", {}, sample(""), " after its parents succeeded"),
    h("li", {}, sample(" any-end"), " after its parents ended, however"),
    h("li", {}, h("span", { class: "tag" }, "may fail"), " its failure does not fail the workflow run"),
    statuses.map((s) => h("li", {}, h("span", { class: `swatch node-swatch s-${s}` }), s)),
  );
}
