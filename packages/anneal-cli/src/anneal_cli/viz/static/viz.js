// anneal viz: one training step as the compiler built it. Reads the document embedded in the page
// (anneal.step_record), draws the step's graph collapsed by module, and links nodes, kernels and passes.
"use strict";

const doc = JSON.parse(document.getElementById("step-data").textContent);
const nodes = doc.nodes;
const mainIds = doc.main;
const inMain = new Set(mainIds);
const kernelByName = new Map(doc.kernels.map((k) => [k.name, k]));
const PHASES = ["forward", "backward", "jvp"];
const OVERVIEW_UNITS = 32; // the first view opens modules, largest first, while it stays this small
const PASS_GRAPH_DRAWN = 150; // a pass's own graph (a kernel's AST) is drawn up to this many nodes; larger ones light up in the main graph

// ---- the graph's structure ----
const users = new Map();
for (const i of mainIds) for (const s of nodes[i].src) if (inMain.has(s)) (users.get(s) || users.set(s, []).get(s)).push(i);

const seam = new Set();
for (const k of doc.kernels) if (k.phase.includes("+")) for (const i of k.nodes) seam.add(i);

// "transformer.h.0.attn" -> ["transformer", "h.0", "attn"]: a list index stays with its list
function segments(path) {
  const out = [];
  for (const part of path ? path.split(".") : []) {
    if (/^\d+$/.test(part) && out.length) out[out.length - 1] += "." + part;
    else out.push(part);
  }
  return out;
}

// Where a node is drawn: its phase and module; inputs and constants go where their first reader is.
const home = new Map();
for (let j = mainIds.length - 1; j >= 0; j--) {
  const i = mainIds[j];
  const n = nodes[i];
  if (PHASES.includes(n.phase)) home.set(i, { phase: n.phase, segs: segments(n.module) });
  else {
    const reader = (users.get(i) || []).find((u) => home.has(u));
    home.set(i, reader !== undefined ? home.get(reader) : { phase: "forward", segs: [] });
  }
}

const groupKey = (phase, segs) => phase + "|" + segs.join("/");
const state = { expanded: new Set(), selected: null, kernel: null, lit: new Set(), changed: new Set(), pass: 0 };

function unitOf(i) {
  const h = home.get(i);
  for (let d = 1; d <= h.segs.length; d++) {
    const key = groupKey(h.phase, h.segs.slice(0, d));
    if (!state.expanded.has(key)) return key;
  }
  if (h.segs.length === 0 && !state.expanded.has(groupKey(h.phase, []))) return groupKey(h.phase, []);
  return "n" + i;
}

function units() {
  const byUnit = new Map();
  for (const i of mainIds) {
    const u = unitOf(i);
    (byUnit.get(u) || byUnit.set(u, []).get(u)).push(i);
  }
  const edges = new Map();
  for (const i of mainIds) {
    const w = unitOf(i);
    for (const s of nodes[i].src) {
      if (!inMain.has(s)) continue;
      const v = unitOf(s);
      if (v !== w) edges.set(v + "\u0000" + w, [v, w]);
    }
  }
  return { byUnit, edges: [...edges.values()] };
}

function unitSizes() {
  const sizes = new Map();
  for (const i of mainIds) { const u = unitOf(i); sizes.set(u, (sizes.get(u) || 0) + 1); }
  return sizes;
}

function openOverview() {
  state.expanded.clear();
  for (;;) {
    const groups = [...unitSizes().entries()].filter(([u]) => !u.startsWith("n")).sort((a, b) => b[1] - a[1]);
    let opened = false;
    for (const [key] of groups) {
      state.expanded.add(key);
      if (unitSizes().size <= OVERVIEW_UNITS) { opened = true; break; }
      state.expanded.delete(key);
    }
    if (!opened) return;
  }
}

function revealNode(i) { // open every module around node i
  const h = home.get(i);
  for (let d = 0; d <= h.segs.length; d++) state.expanded.add(groupKey(h.phase, h.segs.slice(0, d)));
}

// ---- labels ----
const shapeText = (s) => (s === null ? "" : "(" + s.join(",") + ")");
function nodeLabel(i) { const n = nodes[i]; return `%${i} ${n.op} ${shapeText(n.shape)}`.trim(); }
function groupLabel(key, members) {
  const [phase, path] = key.split("|");
  return `${path ? path.replaceAll("/", ".") : "(outside modules)"} · ${phase} · ${members.length} nodes`;
}

// ---- layout, in a Web Worker when the browser allows one ----
const layoutSource = document.getElementById("dagre-source").textContent + "\n" + document.getElementById("layout-source").textContent;
let worker = null;
try { worker = new Worker(URL.createObjectURL(new Blob([layoutSource], { type: "text/javascript" }))); } catch (e) { worker = null; }
const pending = new Map();
let requestId = 0;
if (worker) worker.onmessage = (event) => { const done = pending.get(event.data.id); pending.delete(event.data.id); if (done) done(event.data); };
function layout(request) {
  request.id = ++requestId;
  if (!worker) return Promise.resolve(layoutGraph(request)); // layoutGraph: the same code, on this thread
  return new Promise((resolve) => { pending.set(request.id, resolve); worker.postMessage(request); });
}

// ---- drawing ----
const SVG = "http://www.w3.org/2000/svg";
function el(tag, attrs, parent) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}
const boxWidth = (label) => Math.max(40, label.length * 6.6 + 14);

function drawGraph(svgGroup, placed, items, onClick) {
  svgGroup.replaceChildren();
  for (const e of placed.edges) {
    const d = e.points.map((p, k) => (k ? "L" : "M") + p.x.toFixed(1) + "," + p.y.toFixed(1)).join(" ");
    el("path", { d, class: e.cross ? "edge cross" : "edge" }, svgGroup);
  }
  for (const item of items) {
    const at = placed.nodes[item.id];
    const g = el("g", { class: "unit " + item.classes.join(" "), "data-unit": item.id, transform: `translate(${at.x - item.width / 2},${at.y - 13})` }, svgGroup);
    el("rect", { width: item.width, height: 26, class: item.phase }, g);
    const text = el("text", { x: 7, y: 17 }, g);
    text.textContent = item.label;
    el("title", {}, g).textContent = item.title;
    g.addEventListener("click", (event) => { event.stopPropagation(); onClick(item); });
  }
}

const view = { x: 0, y: 0, k: 1 };
const svg = document.getElementById("graph");
const viewport = document.getElementById("viewport");
const applyView = () => viewport.setAttribute("transform", `translate(${view.x},${view.y}) scale(${view.k})`);
function fit(width, height) {
  const box = svg.getBoundingClientRect();
  view.k = Math.min(1.5, Math.min(box.width / (width + 20), box.height / (height + 20)));
  view.x = (box.width - width * view.k) / 2;
  view.y = 10;
  applyView();
}
svg.addEventListener("wheel", (event) => {
  event.preventDefault();
  const box = svg.getBoundingClientRect();
  const factor = Math.exp(-event.deltaY * 0.0015);
  const px = event.clientX - box.left, py = event.clientY - box.top;
  view.x = px - (px - view.x) * factor;
  view.y = py - (py - view.y) * factor;
  view.k *= factor;
  applyView();
}, { passive: false });
let drag = null;
svg.addEventListener("mousedown", (event) => { drag = { x: event.clientX - view.x, y: event.clientY - view.y }; });
window.addEventListener("mouseup", () => { drag = null; });
window.addEventListener("mousemove", (event) => { if (drag) { view.x = event.clientX - drag.x; view.y = event.clientY - drag.y; applyView(); } });

let latestRender = 0;
async function render(refit = true) {
  const ticket = ++latestRender;
  const started = performance.now();
  const { byUnit, edges } = units();
  const items = [];
  for (const [id, members] of byUnit) {
    const isGroup = !id.startsWith("n");
    const i = isGroup ? null : Number(id.slice(1));
    const label = isGroup ? groupLabel(id, members) : nodeLabel(i);
    const classes = [isGroup ? "group" : "node"];
    if (members.some((m) => seam.has(m))) classes.push("seam");
    if (members.some((m) => state.lit.has(m))) classes.push("lit");
    if (members.some((m) => state.changed.has(m))) classes.push("changed");
    if (!isGroup && i === state.selected) classes.push("selected");
    const phase = isGroup ? id.split("|")[0] : nodes[i].phase;
    const title = isGroup ? "click to open" : `${nodes[i].op} ${nodes[i].dtype} ${nodes[i].module || ""}`;
    const column = isGroup ? phase : home.get(i).phase; // the pass it is drawn with: inputs go with their reader
    items.push({ id, members, label, classes, phase, column, title, width: boxWidth(label), node: i });
  }
  const placed = await layout({ nodes: items.map((u) => ({ id: u.id, width: u.width, height: 26, column: u.column })), edges });
  if (ticket !== latestRender) return; // a newer view was asked for meanwhile
  drawGraph(viewport, placed, items, (item) => {
    if (item.node === null) { state.expanded.add(item.id); render(); }
    else inspect(item.node);
  });
  if (refit) fit(placed.width, placed.height);
  const ms = Math.round(performance.now() - started);
  document.getElementById("status").textContent = `${items.length} boxes of ${mainIds.length} nodes · laid out in ${ms} ms${worker ? " (worker)" : ""}`;
  document.body.dataset.ready = "1";
}

// ---- the inspector ----
function link(cls, text, onClick) {
  const a = document.createElement("a");
  a.className = cls;
  a.textContent = text;
  a.addEventListener("click", onClick);
  return a;
}
function showTab(name) {
  for (const b of document.querySelectorAll("#side nav button")) b.classList.toggle("active", b.dataset.tab === name);
  for (const t of document.querySelectorAll(".tab")) t.classList.toggle("hidden", t.id !== name);
}
for (const b of document.querySelectorAll("#side nav button")) b.addEventListener("click", () => showTab(b.dataset.tab));

function inspect(i, reveal = false) {
  state.selected = i;
  const n = nodes[i];
  const box = document.getElementById("inspector");
  box.replaceChildren();
  const dl = document.createElement("dl");
  dl.className = "inspect";
  const row = (term, ...content) => {
    const dt = document.createElement("dt"); dt.textContent = term; dl.appendChild(dt);
    const dd = document.createElement("dd");
    for (const c of content) dd.append(c);
    dl.appendChild(dd);
  };
  row("node", `%${i} ${n.op}`);
  row("dtype · shape", `${n.dtype} ${shapeText(n.shape)}`);
  if (n.arg) row("arg", n.arg);
  row("phase", n.phase + (seam.has(i) ? " (in a kernel fused across the forward/backward seam)" : ""));
  row("module", n.module || "(outside modules)");
  row("made by", n.made_by || "the model's code (not a rewrite)");
  if (n.why) row("materialized", n.why);
  row("sources", ...n.src.map((s) => link("node-link", "%" + s, () => inspect(s, true))));
  row("users", ...(users.get(i) || []).map((u) => link("node-link", "%" + u, () => inspect(u, true))));
  row("kernels", ...(n.kernels || []).map((k) => link("kernel-link", k, () => showKernel(k))));
  box.appendChild(dl);
  const h = home.get(i);
  if (h && h.segs.length) {
    box.appendChild(link("node-link", "collapse " + h.segs.join("."), () => {
      state.expanded.delete(groupKey(h.phase, h.segs.slice(0, 1)));
      render();
    }));
  }
  showTab("inspector");
  if (reveal && inMain.has(i)) revealNode(i);
  render(false);
}

// ---- kernels ----
const kernelList = document.getElementById("kernel-list");
for (const k of doc.kernels) {
  const li = document.createElement("li");
  li.dataset.kernel = k.name;
  li.textContent = `${k.name} [${k.phase}] ${k.fused_ops} ops · ${k.opts}`;
  if (k.decision) li.title = k.decision;
  li.addEventListener("click", () => showKernel(k.name));
  kernelList.appendChild(li);
}
document.querySelector('#side nav button[data-tab="kernels"]').textContent = `kernels (${doc.kernels.length})`;
function showKernel(name) {
  const k = kernelByName.get(name);
  state.kernel = name;
  state.lit = new Set(k.nodes);
  for (const li of kernelList.children) li.classList.toggle("selected", li.dataset.kernel === name);
  document.getElementById("kernel-decision").textContent = k.decision ? `the optimizer: ${k.decision}` : "";
  document.getElementById("kernel-source").textContent = k.source;
  showTab("kernels");
  kernelList.querySelector(`li[data-kernel="${name}"]`).scrollIntoView({ block: "nearest" });
  render(false);
}

// ---- the pass timeline ----
function reachable(root) {
  const seen = new Set();
  const stack = [root];
  while (stack.length) { const i = stack.pop(); if (seen.has(i)) continue; seen.add(i); stack.push(...nodes[i].src); }
  return seen;
}
const slider = document.getElementById("pass-slider");
slider.max = Math.max(0, doc.passes.length - 1);
async function showPass(p) {
  state.pass = p;
  const pass = doc.passes[p];
  const rules = document.getElementById("pass-rules");
  const passSvg = document.querySelector("#pass-graph g");
  passSvg.replaceChildren();
  if (!pass) { document.getElementById("pass-label").textContent = "no passes recorded"; return; }
  const fired = Object.values(pass.rules).reduce((a, b) => a + b, 0);
  const sizes = pass.nodes_out === undefined ? `${pass.nodes_in} nodes` : `${pass.nodes_in} → ${pass.nodes_out} nodes`;
  document.getElementById("pass-label").textContent =
    `${p + 1}/${doc.passes.length}: ${pass.name}${pass.context ? " on " + pass.context : ""} · ${sizes} · ${fired} rewrites · ${pass.ms} ms`;
  rules.replaceChildren();
  for (const [rule, count] of Object.entries(pass.rules).sort((a, b) => b[1] - a[1])) {
    const div = document.createElement("div");
    div.textContent = `${count}× ${rule}`;
    rules.appendChild(div);
  }
  if (!fired) rules.textContent = "no rule fired (the graph was already in this pass's form)";
  state.changed = new Set(pass.fired.map((f) => f[1]).filter((i) => inMain.has(i)));
  render(false);
  if (pass.root_out === undefined) return;
  const before = reachable(pass.root_in);
  const after = [...reachable(pass.root_out)];
  if (after.length > PASS_GRAPH_DRAWN) { rules.append(` (its graph: ${after.length} nodes, too many to draw here)`); return; }
  const items = after.map((i) => {
    const label = nodeLabel(i);
    return { id: "p" + i, label, classes: before.has(i) ? [] : ["added"], phase: nodes[i].phase, title: nodes[i].made_by || "", width: boxWidth(label), node: i };
  });
  const edges = after.flatMap((i) => nodes[i].src.map((s) => ["p" + s, "p" + i]));
  const placed = await layout({ nodes: items.map((u) => ({ id: u.id, width: u.width, height: 26 })), edges });
  if (state.pass !== p) return;
  drawGraph(passSvg, placed, items, (item) => inspect(item.node));
  const box = document.getElementById("pass-graph").getBoundingClientRect();
  const k = Math.min(1, box.width / (placed.width + 10), box.height / (placed.height + 10));
  passSvg.setAttribute("transform", `scale(${k})`);
}
slider.addEventListener("input", () => showPass(Number(slider.value)));

// ---- start ----
const kinds = Object.entries(doc.phases).map(([k, v]) => `${v} ${k}`).join(", ");
document.getElementById("summary").textContent =
  `${doc.title} on ${doc.device}: ${mainIds.length} nodes (${kinds}), ${doc.kernels.length} kernels, ${doc.passes.length} passes` +
  (doc.truncated ? " (trace truncated)" : "");
document.getElementById("collapse-all").addEventListener("click", () => { openOverview(); render(); });
openOverview();
render().then(() => showPass(0));
window.annealViz = { doc, state, render, inspect, showKernel, showPass, unitOf, units, layout, openOverview };
