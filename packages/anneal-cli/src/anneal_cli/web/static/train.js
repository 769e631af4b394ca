// The train view: starts `anneal train` through the studio's API and draws its losses as they stream in.
"use strict";
(() => {
  const form = document.getElementById("train-form");
  const stop = document.getElementById("stop");
  const status = document.getElementById("train-status");
  const log = document.getElementById("train-log");
  const chart = document.getElementById("train-chart");
  const params = new URLSearchParams(location.search);
  if (params.get("model")) form.elements.model.value = params.get("model");
  let job = null;
  let points = [];

  function draw() {
    const w = chart.clientWidth || 640, h = chart.clientHeight || 220;
    const ok = points.filter((p) => p.loss > 0 && Number.isFinite(p.loss));
    if (ok.length < 1) { chart.replaceChildren(); return; }
    const xs = ok.map((p) => p.step), ys = ok.map((p) => Math.log(p.loss));
    const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1), y0 = Math.min(...ys), y1 = Math.max(...ys, y0 + 1e-9);
    const at = (p) => `${(8 + (p.step - x0) / (x1 - x0) * (w - 16)).toFixed(1)},${(8 + (y1 - Math.log(p.loss)) / (y1 - y0) * (h - 16)).toFixed(1)}`;
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", ok.map(at).join(" "));
    line.setAttribute("class", "train");
    chart.replaceChildren(line);
    chart.dataset.points = String(ok.length);
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    points = [];
    log.textContent = "";
    draw();
    const fields = Object.fromEntries(new FormData(form));
    const response = await fetch("/api/train", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(fields) });
    if (!response.ok) { status.textContent = "refused: " + (await response.text()); return; }
    job = await response.json();
    status.textContent = `running ${job.id}`;
    status.dataset.state = "running";
    stop.disabled = false;
    const events = new EventSource(`/api/train/${encodeURIComponent(job.id)}/events`);
    events.addEventListener("step", (m) => {
      const record = JSON.parse(m.data);
      points.push(record);
      log.textContent += `step ${record.step}/${record.steps}  loss ${record.loss.toFixed(4)}\n`;
      status.textContent = `running ${job.id}: step ${record.step}/${record.steps}`;
      draw();
    });
    events.addEventListener("line", (m) => { log.textContent += JSON.parse(m.data) + "\n"; });
    events.addEventListener("done", (m) => {
      const done = JSON.parse(m.data);
      status.textContent = `${done.state} ${done.id} (exit ${done.returncode}) after ${points.length} logged steps`;
      status.dataset.state = done.state;
      stop.disabled = true;
      events.close();
    });
  });

  stop.addEventListener("click", async () => {
    if (!job) return;
    stop.disabled = true;
    await fetch(`/api/train/${encodeURIComponent(job.id)}/stop`, { method: "POST" });
  });
})();
