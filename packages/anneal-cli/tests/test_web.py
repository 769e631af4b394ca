"""`anneal web`: the studio's eight views in a real headless Chromium (Playwright), each showing the real data
(checked against the CLI's own output), a training started and stopped from the page, and what it refuses."""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import Page, start_server, stop_server
from click.testing import CliRunner

from anneal.data.testing import shared_data_dir
from anneal_autodiff import vjp
from anneal_cli.main import AnnealGroup


@pytest.fixture(scope="module")
def data_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of every process here: the pinned tinyshakespeare in a private cache, used offline."""
    cache = tmp_path_factory.mktemp("cache")
    (cache / "data" / "tinyshakespeare").mkdir(parents=True)
    shutil.copy(shared_data_dir(__file__) / "tinyshakespeare" / "input.txt", cache / "data" / "tinyshakespeare")
    return {**os.environ, "ANNEAL_CACHE_DIR": str(cache), "ANNEAL_OFFLINE": "1"}


def _start(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    return start_server(["web", *args, "--no-open"], r"the studio at (http://\S+)", env)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, data_env: dict[str, str]) -> Path:
    """A runs folder holding a language model (nanogpt tiny) and an image generator (diffusion tiny), a few steps
    each, as `anneal train --out` writes them."""
    root = tmp_path_factory.mktemp("runs")
    for model, folder in (("nanogpt", "tiny-gpt"), ("diffusion", "tiny-diffusion")):
        result = subprocess.run([sys.executable, "-m", "anneal_cli.main", "train", model, "--preset", "tiny", "--steps",
                                 "3", "--device", "cpu", "--plain", "--out", str(root / folder)],
                                capture_output=True, text=True, timeout=300, env=data_env)  # fmt: skip
        assert result.returncode == 0, result.stderr
    return root


@pytest.fixture(scope="module")
def studio(runs: Path, data_env: dict[str, str]) -> Iterator[str]:
    proc, url = _start(["127.0.0.1:0", "--runs", str(runs)], data_env)
    yield url.removesuffix("/studio")
    stop_server(proc)


def _count(cli: AnnealGroup, runner: CliRunner, *args: str) -> int:
    result = runner.invoke(cli, [*args])
    assert result.exit_code == 0, result.output
    return int(result.output.strip().splitlines()[-1].split()[0])


def test_the_studio_lists_models_devices_and_runs(browser: Any, studio: str) -> None:
    from anneal.registry import plugins

    view = Page(browser, studio + "/studio", ready="main")
    text = view.page.inner_text("main")
    for name in plugins().models:
        assert name in text
    assert "cpu" in view.page.inner_text("table.devices")
    assert "tiny-gpt" in view.page.inner_text("table.runs")
    view.close()


def test_kernels_view_counts_what_anneal_kernels_counts(browser: Any, studio: str, cli: AnnealGroup,
                                                        runner: CliRunner) -> None:  # fmt: skip
    view = Page(browser, studio + "/kernels?model=mlp&preset=tiny", ready="#kernel-count")
    expected = _count(cli, runner, "kernels", "mlp", "--preset", "tiny", "--backward", "--no-source")
    assert view.page.inner_text("#kernel-count").startswith(f"{expected} kernels")
    assert view.page.locator("table.kernels tbody tr").count() == expected
    view.close()


def test_visualize_view_is_the_viz_page(browser: Any, studio: str) -> None:
    view = Page(browser, studio + "/visualize?model=mlp&preset=tiny")
    assert view.boxes() > 0
    view.close()


def test_explain_view_shows_the_rule_source_and_a_mini_graph(browser: Any, studio: str) -> None:
    view = Page(browser, studio + "/explain?op=exp2", ready="main")
    text = view.page.inner_text("main")
    assert inspect.getsource(vjp.exp2_vjp).splitlines()[0] in text  # the real rule, from its table
    assert view.page.locator("svg.mini").count() == 2  # before and after
    assert view.page.locator("svg.mini g.new").count() > 0  # the gradient's nodes, marked new
    view.close()


def test_a_training_started_in_the_train_view_streams_and_stops(browser: Any, studio: str, runs: Path) -> None:
    view = Page(browser, studio + "/train?model=mlp", ready="#train-form")
    page = view.page
    page.select_option("#preset", "tiny")
    page.fill('input[name="steps"]', "100000")
    page.fill('input[name="flags"]', "--device cpu --log-every 5")
    page.click('#train-form button[type="submit"]')
    deadline = time.monotonic() + 60  # losses arrive while it runs (polled here: the page's CSP forbids eval)
    while int(page.locator("#train-chart").get_attribute("data-points") or 0) < 3:
        assert time.monotonic() < deadline, page.inner_text("#train-status") + page.inner_text("#train-log")
        page.wait_for_timeout(200)
    assert re.search(r"step \d+/100000  loss \d", page.inner_text("#train-log"))
    page.click("#stop")
    page.wait_for_selector("#train-status[data-state='stopped']", timeout=30_000)
    folders = [p for p in runs.iterdir() if p.name.startswith("mlp-")]
    assert folders and (folders[0] / "config.json").is_file()  # the same run folder the CLI writes
    view.close()


def test_generate_view_samples_from_a_run(browser: Any, studio: str) -> None:
    view = Page(browser, studio + "/generate?run=tiny-gpt&prompt=ROMEO&max_tokens=20", ready="main")
    assert view.page.locator("pre.sample").count() == 1
    assert view.page.inner_text("pre.sample").startswith("ROMEO")
    view.close()


def test_generate_view_draws_a_grid_from_an_image_model_run(browser: Any, studio: str, runs: Path) -> None:
    view = Page(browser, studio + "/generate?run=tiny-diffusion&prompt=ignored", ready="main")
    assert view.page.locator("pre.error").count() == 0, view.page.inner_text("main")
    image = view.page.locator("img#sample-image")
    image.wait_for()
    assert image.evaluate("i => i.naturalWidth") > 0  # the PNG decoded
    grid = runs / "tiny-diffusion" / "samples" / "studio.png"
    assert grid.read_bytes().startswith(b"\x89PNG")
    view.close()


def test_history_view_shows_each_run_with_its_curve(browser: Any, studio: str, runs: Path) -> None:
    view = Page(browser, studio + "/history", ready="main")
    folders = [p.name for p in runs.iterdir() if (p / "config.json").is_file()]
    assert view.page.locator("div.run").count() == len(folders)
    card = view.page.locator('div.run[data-run="tiny-gpt"]')
    assert "nanogpt" in card.inner_text() and card.locator("polyline.train").count() == 1
    images = view.page.locator('div.run[data-run="tiny-diffusion"] img')
    assert images.count() >= 1  # the samples the run wrote, each loaded from inside its folder (close() checks 404s)
    assert all(images.nth(k).evaluate("i => i.naturalWidth") > 0 for k in range(images.count()))
    view.close()


def test_doctor_view_is_anneal_doctor(browser: Any, studio: str) -> None:
    view = Page(browser, studio + "/doctor", ready="pre.doctor")
    assert "numpy" in view.page.inner_text("pre.doctor")
    view.close()


# ---- refusals ----
def _status(url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def test_a_cross_origin_post_is_refused(studio: str) -> None:
    body = b"model=mlp&preset=tiny&steps=1"
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    assert _status(studio + "/api/train", body, {**form, "Origin": "http://evil.example"}) == 403
    assert _status(studio + "/api/train", body, form) == 403  # no Origin at all: not from the studio's page


def test_a_run_outside_the_runs_folder_is_refused(studio: str) -> None:
    assert _status(studio + "/history?run=../../etc") == 400
    assert _status(studio + "/runs/..%2F..%2Fetc/passwd") in (400, 404)
    assert _status(studio + "/generate?run=/etc") == 400


def test_a_non_loopback_address_needs_the_flag(cli: AnnealGroup, runner: CliRunner) -> None:
    result = runner.invoke(cli, ["web", "0.0.0.0:0", "--no-open"])
    assert result.exit_code == 2 and "--allow-remote" in result.output


def test_with_a_token_every_request_needs_it(runs: Path, data_env: dict[str, str]) -> None:
    proc, url = _start(["0.0.0.0:0", "--allow-remote", "--runs", str(runs)], data_env)
    try:
        token = url.split("token=")[1]
        base = url.split("/studio")[0].replace("0.0.0.0", "127.0.0.1")
        assert _status(base + "/studio") == 403
        assert _status(base + "/studio?token=wrong") == 403
        assert _status(base + f"/studio?token={token}") == 200
        assert _status(base + "/doctor", headers={"x-anneal-token": token}) == 200
    finally:
        stop_server(proc)


def test_bad_addresses_are_usage_errors(cli: AnnealGroup, runner: CliRunner) -> None:
    for addr in ("127.0.0.1:http", "127.0.0.1:70000"):
        result = runner.invoke(cli, ["web", addr, "--no-open"])
        assert result.exit_code == 2, (addr, result.output)


def test_the_studio_pages_run_no_inline_script(studio: str) -> None:
    with urllib.request.urlopen(studio + "/train", timeout=20) as response:
        page = response.read().decode()
        assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    assert re.findall(r"<script[^>]*>", page) == ['<script src="/static/train.js">']
    assert json.loads(json.dumps(page))  # the page is text, not a template left unfilled
    assert "{" not in re.sub(r"<pre.*?</pre>", "", page, flags=re.S)


def test_the_explain_view_shows_what_a_tensor_level_name_lowers_to(studio: str, cli: AnnealGroup,
                                                                   runner: CliRunner) -> None:  # fmt: skip
    import html

    with urllib.request.urlopen(studio + "/explain?op=F.conv2d", timeout=20) as response:
        page = html.unescape(response.read().decode())
    printed = runner.invoke(cli, ["explain", "F.conv2d"]).output.splitlines()
    rows = [line for line in printed[1:] if line.startswith("%")]
    assert printed[0].removeprefix("== ") in page and len(rows) > 10 and all(row in page for row in rows)
    assert _status(studio + "/explain?op=item") == 400  # a name without a graph: refused, saying why
