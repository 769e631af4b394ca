// Graph layout off the page's thread: dagre (vendored) is prepended to this source.
// Message in: {id, nodes: [{id, width, height, column}], edges: [[from, to]]}; out: positions and edge paths.
// Nodes are laid out per column (the forward pass top-down, the backward pass beside it bottom-up, so each
// module's gradient sits level with the module); edges between columns are drawn straight, not routed:
// routing the many long forward-to-backward edges through one layered layout is what makes it slow.
const COLUMN_DIRECTION = { forward: "TB", backward: "BT", jvp: "TB" };
const COLUMN_GAP = 60;

function layoutColumn(nodes, edges, direction) {
  const g = new dagre.graphlib.Graph({ multigraph: false });
  g.setGraph({ rankdir: direction, nodesep: 18, ranksep: 34, marginx: 10, marginy: 10 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const n of nodes) g.setNode(n.id, { width: n.width, height: n.height });
  for (const [v, w] of edges) g.setEdge(v, w);
  dagre.layout(g);
  const placed = {};
  for (const id of g.nodes()) { const n = g.node(id); placed[id] = { x: n.x, y: n.y }; }
  const routed = g.edges().map((e) => ({ v: e.v, w: e.w, points: g.edge(e).points }));
  return { placed, routed, width: g.graph().width || 0, height: g.graph().height || 0 };
}

function layoutGraph(request) {
  const columnOf = new Map(request.nodes.map((n) => [n.id, n.column || "forward"]));
  const columns = [...new Set(request.nodes.map((n) => n.column || "forward"))];
  const nodes = {};
  const edges = [];
  let x0 = 0, height = 0;
  for (const column of columns) {
    const inside = request.edges.filter(([v, w]) => columnOf.get(v) === column && columnOf.get(w) === column);
    const part = layoutColumn(request.nodes.filter((n) => (n.column || "forward") === column), inside, COLUMN_DIRECTION[column] || "TB");
    for (const [id, at] of Object.entries(part.placed)) nodes[id] = { x: at.x + x0, y: at.y };
    for (const e of part.routed) edges.push({ v: e.v, w: e.w, points: e.points.map((p) => ({ x: p.x + x0, y: p.y })) });
    x0 += part.width + COLUMN_GAP;
    height = Math.max(height, part.height);
  }
  for (const [v, w] of request.edges) {
    if (columnOf.get(v) !== columnOf.get(w)) edges.push({ v, w, points: [nodes[v], nodes[w]], cross: true });
  }
  return { id: request.id, nodes, edges, width: Math.max(0, x0 - COLUMN_GAP), height };
}

if (typeof WorkerGlobalScope !== "undefined" && self instanceof WorkerGlobalScope) {
  self.onmessage = (event) => self.postMessage(layoutGraph(event.data));
}
