"""The studio's routes (Starlette): eight views and the small JSON API the train view streams from."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from anneal_cli.web.jobs import Jobs
from anneal_cli.web.security import TOKEN_COOKIE, Guard, Refused
from anneal_cli.web.views import CSP, e, form, graph_svg, layout, link, loss_svg, pre, select, table

PRESETS = ["tiny", "small", "full"]
STATIC = Path(__file__).parent / "static"


def _cli(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """The CLI itself, as a child: the studio shows exactly what the command prints."""
    return subprocess.run([sys.executable, "-m", "anneal_cli.main", *argv], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def _models() -> dict[str, Any]:
    from anneal.registry import plugins

    return dict(plugins().models)


def _runs(guard: Guard) -> list[dict[str, Any]]:
    """The run folders under the runs root, newest first (what `anneal train --out` wrote)."""
    from anneal_cli.runs import read_csv

    out = []
    root = guard.runs_root
    configs = sorted(root.glob("*/config.json"), key=lambda p: p.stat().st_mtime, reverse=True) if root.is_dir() else []
    for config in configs:
        folder = config.parent
        try:
            meta = json.loads(config.read_text())
            rows = read_csv(folder / "loss.csv") if (folder / "loss.csv").is_file() else []
        except Exception:  # a half-written or foreign folder: listed, not read
            meta, rows = {"model": "?", "config": {}}, []
        out.append({"name": folder.name, "model": meta.get("model", "?"), "config": meta.get("config", {}),
                    "rows": [(r.step, r.loss, r.val) for r in rows],  # samples: paths inside the run, for /runs/
                    "samples": sorted(p.relative_to(folder).as_posix() for p in folder.glob("**/*.png"))})  # fmt: skip
    return out


def studio_app(guard: Guard, step_document: Callable[[str, str | None], dict[str, Any]]) -> Starlette:
    jobs = Jobs(guard.runs_root)
    documents: dict[tuple[str, str | None], dict[str, Any]] = {}

    async def document(model: str, preset: str | None) -> dict[str, Any]:
        key = (model, preset)
        if key not in documents:
            documents[key] = await asyncio.to_thread(step_document, model, preset)
        return documents[key]

    def model_form(view: str, model: str | None, preset: str | None) -> str:
        fields = (f"<label>model {select('model', sorted(_models()), model)}</label> "
                  f"<label>preset {select('preset', PRESETS, preset or 'tiny')}</label>")  # fmt: skip
        return form(f"/{view}", fields, "show")

    async def studio(request: Request) -> Response:
        models = table(["model", "what", "presets", "train"], (
            [e(name), e(m.summary), e(", ".join(m.presets)), f'<a href="{link("/train", model=name)}">train</a>']
            for name, m in sorted(_models().items())))  # fmt: skip
        from anneal_cli.info import devices_report

        report = await asyncio.to_thread(devices_report)
        rows = ([e(b["name"]), e("yes" if b["available"] else "no"), e(b["detail"])] for b in report["backends"])
        devices = table(["device", "available", "detail"], rows, "devices")
        devices += f"<p>auto picks {e(report['auto']['device'])}: {e(report['auto']['note'])}</p>"
        runs = _runs(guard)[:5]
        recent = table(["run", "model", "steps", "last loss"], (
            [f'<a href="{link("/history", run=r["name"])}">{e(r["name"])}</a>', e(r["model"]),
             e(r["rows"][-1][0] if r["rows"] else 0), e(f"{r['rows'][-1][1]:.4f}" if r["rows"] else "-")]
            for r in runs), "runs")  # fmt: skip
        body = f"<h2>models</h2>{models}<h2>devices</h2>{devices}<h2>recent runs</h2>{recent}"
        return page("studio", "studio", body)

    async def visualize(request: Request) -> Response:
        model = request.query_params.get("model")
        if not model:
            return page("visualize", "visualize a step", model_form("visualize", None, None))
        from anneal_cli.viz.page import render_page

        preset = request.query_params.get("preset") or "tiny"
        check_model(model, preset)
        return HTMLResponse(render_page(await document(model, preset)))  # the viz page, with its own CSP

    async def kernels(request: Request) -> Response:
        model, preset = request.query_params.get("model"), request.query_params.get("preset") or "tiny"
        body = model_form("kernels", model, preset)
        if model:
            check_model(model, preset)
            doc = await document(model, preset)
            rows = (
                [
                    e(k["name"]),
                    e(k["phase"]),
                    e(k["fused_ops"]),
                    e(k["opts"]),
                    f"<details><summary>source</summary>{pre(k['source'])}</details>",
                ]
                for k in doc["kernels"]
            )
            seam = sum("+" in k["phase"] for k in doc["kernels"])
            listing = table(["kernel", "phase", "ops", "opts", ""], rows, "kernels")
            body += (f'<p id="kernel-count">{len(doc["kernels"])} kernels on {e(doc["device"])}; {seam} fused '
                     f"across the forward/backward seam</p>{listing}")  # fmt: skip
        return page("kernels", f"kernels of {model}" if model else "kernels", body)

    async def explain(request: Request) -> Response:
        from anneal.introspect import explain as explain_op
        from anneal.introspect import gradient_example, known_ops

        op = request.query_params.get("op", "")
        body = form("/explain", f"<label>op {select('op', known_ops(), op.lower() or None)}</label>", "explain")
        if op:
            try:
                found = explain_op(op)
            except KeyError as exc:
                raise Refused(400, str(exc.args[0])) from None
            if found.example:  # a Tensor-level name: the graph its example call builds, as `anneal explain` prints it
                from anneal.introspect import row_text

                head = f"{found.example} lowers to {len(found.lowering)} UOps ({found.inputs})"
                body += f"<h2>{e(head)}</h2>" + pre("\n".join(row_text(r) for r in found.lowering), "lowering")
            example = gradient_example(op)
            if example is not None:
                before, after = example
                body += ('<h2>before and after: the op, and the gradient graph its VJP rule builds</h2>'
                         f'<div class="graphs">{_mini(before)}{_mini(after, new_against=before)}</div>')  # fmt: skip
            for name, rules in found.tables.items():
                body += f"<h2>{e(name)}: {len(rules)} rule(s)</h2>" + "".join(pre(r, "rule") for r in rules)
        return page("explain", f"explain {op}" if op else "explain", body)

    async def train(request: Request) -> Response:
        model = request.query_params.get("model")
        fields = (f"<label>model {select('model', sorted(_models()), model)}</label> "
                  f"<label>preset {select('preset', PRESETS, 'tiny')}</label> "
                  '<label>steps <input name="steps" type="number" min="1" value="50"></label> '
                  '<label>flags <input name="flags" size="40" '
                  'placeholder="--lr 0.01 --batch 64 --set key=value"></label>')  # fmt: skip
        body = (form("/api/train", fields, "start", "post", "train-form") + ' <button id="stop" disabled>stop</button>'
                '<p id="train-status">no run yet</p><svg id="train-chart" width="640" height="220"></svg>'
                '<pre id="train-log"></pre>')  # fmt: skip
        return page("train", "train a model", body, scripts=["train.js"])

    async def generate(request: Request) -> Response:
        runs = [r["name"] for r in _runs(guard)]
        run, prompt = request.query_params.get("run"), request.query_params.get("prompt", "")
        fields = (f"<label>run {select('run', runs, run)}</label> "
                  f'<label>prompt <input name="prompt" value="{e(prompt)}"></label> '
                  '<label>tokens <input name="max_tokens" type="number" min="1" value="100"></label>')  # fmt: skip
        body = form("/generate", fields, "generate")
        if run:
            tokens = request.query_params.get("max_tokens", "100")
            body += await asyncio.to_thread(_generate, guard, run, prompt, tokens)
        return page("generate", "generate from a run", body)

    async def history(request: Request) -> Response:
        chosen = request.query_params.get("run")
        runs = _runs(guard)
        if chosen:
            guard.run_path(chosen)
            runs = [r for r in runs if r["name"] == chosen]
        cards = "".join(_run_card(r) for r in runs)
        body = f'<p>{len(runs)} run(s) in {e(guard.runs_root)}</p><div class="runs">{cards}</div>'
        return page("history", "history", body)

    async def doctor(request: Request) -> Response:
        result = await asyncio.to_thread(_cli, "doctor")
        return page("doctor", "doctor", pre(result.stdout + result.stderr, "doctor"))

    async def run_file(request: Request) -> Response:
        path = guard.run_path(request.path_params["run"]) / request.path_params["file"]
        if not path.resolve().is_relative_to(guard.run_path(request.path_params["run"])) or not path.is_file():
            raise Refused(404, "no such file in that run")
        return FileResponse(path)

    async def api_train(request: Request) -> Response:
        try:
            form_data = await request.json()  # the train view posts its form as JSON (no form parser needed)
        except ValueError:
            raise Refused(400, "the body must be a JSON object of the train form's fields") from None
        if not isinstance(form_data, dict):
            raise Refused(400, "the body must be a JSON object of the train form's fields")
        model = str(form_data.get("model", ""))
        check_model(model, str(form_data.get("preset", "tiny")))
        flags = ["--preset", str(form_data.get("preset", "tiny")), "--steps", str(form_data.get("steps", "50")),
                 *str(form_data.get("flags", "")).split()]  # fmt: skip
        job = jobs.start(model, flags)
        return JSONResponse(job.status())

    async def api_stop(request: Request) -> Response:
        job = jobs.jobs.get(request.path_params["job"])
        if job is None:
            raise Refused(404, "no such training run")
        job.stop()
        return JSONResponse(job.status())

    async def api_events(request: Request) -> Response:
        job = jobs.jobs.get(request.path_params["job"])
        if job is None:
            raise Refused(404, "no such training run")

        async def stream() -> AsyncIterator[str]:
            sent_records, sent_lines = 0, 0
            while True:
                await asyncio.to_thread(job.wait_for_change, sent_records + sent_lines, 1.0)
                for record in job.records[sent_records:]:
                    yield f"event: step\ndata: {json.dumps(record)}\n\n"
                for line in job.lines[sent_lines:]:
                    yield f"event: line\ndata: {json.dumps(line)}\n\n"
                sent_records, sent_lines = len(job.records), len(job.lines)
                if job.returncode is not None:
                    yield f"event: done\ndata: {json.dumps(job.status())}\n\n"
                    return

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})

    def check_model(model: str, preset: str) -> None:
        if model not in _models():
            raise Refused(400, f"unknown model {model!r}; known: {', '.join(sorted(_models()))}")
        if preset not in PRESETS:
            raise Refused(400, f"unknown preset {preset!r}; one of {', '.join(PRESETS)}")

    def page(view: str, title: str, body: str, scripts: list[str] | None = None) -> HTMLResponse:
        return HTMLResponse(layout(view, title, body, scripts or []), headers={"Content-Security-Policy": CSP})

    class Guarded(BaseHTTPMiddleware):
        async def dispatch(self, request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
            try:
                guard.check(request)
                response = await call_next(request)
            except Refused as refused:
                return PlainTextResponse(refused.reason, status_code=refused.status)
            if guard.token is not None and request.query_params.get("token") == guard.token:
                response.set_cookie(TOKEN_COOKIE, guard.token, httponly=True, samesite="strict")
            return response

    async def refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Refused)
        return PlainTextResponse(exc.reason, status_code=exc.status)

    async def home(request: Request) -> Response:
        return await studio(request)

    routes = [
        Route("/", home), Route("/studio", studio), Route("/visualize", visualize), Route("/kernels", kernels),
        Route("/explain", explain), Route("/train", train), Route("/generate", generate), Route("/history", history),
        Route("/doctor", doctor), Route("/runs/{run}/{file:path}", run_file),
        Route("/api/train", api_train, methods=["POST"]), Route("/api/train/{job}/stop", api_stop, methods=["POST"]),
        Route("/api/train/{job}/events", api_events), Mount("/static", StaticFiles(directory=STATIC)),
    ]  # fmt: skip
    app = Starlette(routes=routes, middleware=[Middleware(Guarded)], exception_handlers={Refused: refused})
    app.state.jobs = jobs
    return app


def _run_card(run: dict[str, Any]) -> str:
    rows = run["rows"]
    last = f"{rows[-1][1]:.4f}" if rows else "-"
    samples = "".join(f'<img alt="{e(s)}" src="{link("/runs/" + run["name"] + "/" + s)}">' for s in run["samples"])
    return (f'<div class="run" data-run="{e(run["name"])}"><h3>{e(run["name"])}</h3>'
            f'<p>{e(run["model"])}, {e(rows[-1][0] if rows else 0)} steps, last loss {e(last)}</p>'
            f'{loss_svg(rows)}{pre(json.dumps(run["config"], indent=1), "config")}{samples}</div>')  # fmt: skip


def _mini(root: Any, new_against: Any = None) -> str:
    from anneal.introspect import _short

    order = [n for n in root.toposort() if n.op.name != "SINK"]
    index = {n: i for i, n in enumerate(order)}
    old = set(new_against.toposort()) if new_against is not None else set()
    nodes = [(f"{n.op.name} {_short(n.arg) if n.op.name in ('DEFINE_VAR', 'CONST') else ''}".strip(),
              [index[s] for s in n.src if s in index]) for n in order]  # fmt: skip
    return graph_svg(nodes, {i for i, n in enumerate(order) if new_against is not None and n not in old})


def _generate(guard: Guard, run: str, prompt: str, max_tokens: str) -> str:
    folder = guard.run_path(run)
    model = str(json.loads((folder / "config.json").read_text()).get("model"))
    entry = _models().get(model)
    if entry is None or not entry.samples:
        return pre(f"{run} is a run of {model!r}, which does not generate", "error")
    if entry.samples == "images":  # a labelled grid, written into the run folder and shown from there
        out = folder / "samples" / "studio.png"
        out.parent.mkdir(exist_ok=True)
        image = _cli("sample", model, "--checkpoint", str(folder), "--out", str(out))
        if image.returncode != 0:
            return pre(image.stderr.strip(), "error")
        return f'<img id="sample-image" alt="samples" src="{link("/runs/" + run + "/samples/studio.png")}">'
    text = _cli("sample", model, "--checkpoint", str(folder), "--prompt", prompt or "\n", "--max-tokens", max_tokens)
    if text.returncode != 0:
        return pre(text.stderr.strip() or text.stdout.strip(), "error")
    return "<h2>sample</h2>" + pre(text.stdout, "sample")
