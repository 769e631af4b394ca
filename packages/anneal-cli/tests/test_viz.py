"""`anneal viz`: the command, its server, and the page in a real headless Chromium (Debian's, driven by
Playwright). The page's numbers are checked against the compiler's own answers (`anneal kernels`)."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import Page, start_server, stop_server
from click.testing import CliRunner

from anneal_cli.main import AnnealGroup
from anneal_cli.viz.page import render_page

MLP = ["mlp", "--preset", "tiny", "--device", "cpu", "--backward"]


def _data(page: str) -> dict[str, Any]:
    found = re.search(r'<script type="application/json" id="step-data">(.*?)</script>', page, re.S)
    assert found, "the page carries no step data"
    return json.loads(found.group(1))


def _kernel_count(cli: AnnealGroup, runner: CliRunner) -> int:
    result = runner.invoke(cli, ["kernels", *MLP, "--no-source"])
    assert result.exit_code == 0, result.output
    return int(result.output.strip().splitlines()[-1].split()[0])


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("viz") / "step.html"
    result = CliRunner().invoke(_cli(), ["viz", *MLP, "--export", str(path)])
    assert result.exit_code == 0, result.output
    assert "no server needed" in result.output
    return path


def _cli() -> AnnealGroup:
    from anneal_cli.main import build_cli

    return build_cli()


def test_export_is_one_page_with_the_real_kernels(exported: Path, cli: AnnealGroup, runner: CliRunner) -> None:
    page = exported.read_text()
    doc = _data(page)
    assert len(doc["kernels"]) == _kernel_count(cli, runner)
    assert doc["phases"]["forward"] > 0 and doc["phases"]["backward"] > 0
    assert not re.findall(r'(?:src|href)="(?!data:)', page)  # everything inline: nothing is fetched


def test_page_text_cannot_end_its_scripts_early() -> None:
    nasty = "</script><script>alert(1)</script>"
    page = render_page({"title": nasty, "nodes": [{"arg": nasty}], "main": [], "kernels": [], "passes": [],
                        "phases": {}, "device": "cpu"})  # fmt: skip
    assert page.lower().count("</script>") == page.lower().count("<script") == 4  # the page's own four
    assert nasty not in page
    assert "<title>anneal viz: &lt;/script&gt;" in page
    assert _data(page)["nodes"][0]["arg"] == nasty  # the data reads back exactly


def test_export_into_a_missing_folder_is_a_usage_error(cli: AnnealGroup, runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["viz", *MLP, "--export", str(tmp_path / "nope" / "x.html")])
    assert result.exit_code == 2 and "does not exist" in result.output


def test_an_unknown_model_is_a_usage_error(cli: AnnealGroup, runner: CliRunner) -> None:
    result = runner.invoke(cli, ["viz", "no-such-model", "--export", "x.html"])
    assert result.exit_code == 2 and "no-such-model" in result.output


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    """`anneal viz` as a user runs it, on a free port; yields its address."""
    proc, url = start_server(["viz", *MLP, "--port", "0", "--no-open"], r"at (http://\S+/) \(Ctrl-C stops\)")
    yield url
    stop_server(proc)


def test_serves_on_loopback_only(served: str, cli: AnnealGroup, runner: CliRunner) -> None:
    assert served.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(served + "api/step.json", timeout=10) as response:
        doc = json.load(response)
    assert len(doc["kernels"]) == _kernel_count(cli, runner)
    with urllib.request.urlopen(served, timeout=10) as response:
        assert _data(response.read().decode())["kernels"] == doc["kernels"]


# ---- in the browser (the browser fixture and Page: conftest.py, browser.py) ----
def test_the_page_shows_the_real_graph_and_kernels(browser: Any, served: str, cli: AnnealGroup,
                                                   runner: CliRunner) -> None:  # fmt: skip
    view = Page(browser, served)
    doc = view.page.evaluate("window.annealViz.doc")
    kernels = _kernel_count(cli, runner)
    assert view.page.inner_text('#side nav button[data-tab="kernels"]') == f"kernels ({kernels})"
    assert view.page.locator("#kernel-list li").count() == kernels
    assert f"{len(doc['main'])} nodes" in view.page.inner_text("#summary")
    assert view.page.locator("#viewport g.unit rect.forward").count() > 0
    assert view.page.locator("#viewport g.unit rect.backward").count() > 0
    assert all(url.startswith(served) or url.startswith("blob:") for url in view.requests), view.requests
    view.close()


def test_opening_a_module_and_inspecting_a_node_and_its_kernel(browser: Any, served: str) -> None:
    view = Page(browser, served)
    page = view.page
    page.evaluate("document.body.dataset.ready = '0'")  # so the wait below is for this click's layout
    page.click("#collapse-all")
    page.wait_for_selector("body[data-ready='1']")
    before = view.boxes()
    groups = page.locator("#viewport g.unit.group")
    assert groups.count() > 0
    page.evaluate("document.body.dataset.ready = '0'")
    groups.first.click()
    page.wait_for_selector("body[data-ready='1']")
    assert view.boxes() > before  # the module opened into its parts
    page.evaluate("document.body.dataset.ready = '0'")
    page.locator("#viewport g.unit.node").first.click()
    page.wait_for_selector("body[data-ready='1']")
    assert "phase" in page.inner_text("#inspector") and "made by" in page.inner_text("#inspector")
    kernel_links = page.locator("#inspector a.kernel-link")
    if kernel_links.count() == 0:  # an input: follow it to a user that a kernel computes
        page.locator("#inspector a.node-link").last.click()
        kernel_links = page.locator("#inspector a.kernel-link")
    name = kernel_links.first.inner_text()
    kernel_links.first.click()
    doc_source = page.evaluate(f"window.annealViz.doc.kernels.find(k => k.name === {json.dumps(name)}).source")
    assert page.inner_text("#kernel-source") == doc_source
    assert page.locator(f'#kernel-list li.selected[data-kernel="{name}"]').count() == 1
    page.wait_for_selector("#viewport g.unit.lit")  # the kernel's nodes light up in the graph
    view.close()


def test_the_timeline_scrubs_through_the_passes(browser: Any, served: str) -> None:
    view = Page(browser, served)
    page = view.page
    doc = page.evaluate("window.annealViz.doc")
    assert page.inner_text("#pass-label").startswith(f"1/{len(doc['passes'])}: {doc['passes'][0]['name']}")
    fired = next(i for i, p in enumerate(doc["passes"]) if p["rules"] and "root_out" in p)
    page.locator("#pass-slider").fill(str(fired))
    label = page.inner_text("#pass-label")
    assert label.startswith(f"{fired + 1}/{len(doc['passes'])}: {doc['passes'][fired]['name']}"), label
    rule = max(doc["passes"][fired]["rules"], key=doc["passes"][fired]["rules"].get)
    assert rule in page.inner_text("#pass-rules")
    page.wait_for_selector("#pass-graph g.unit")  # the pass's own (kernel-sized) graph is drawn
    view.close()


def test_the_export_opens_offline(browser: Any, exported: Path) -> None:
    view = Page(browser, exported.as_uri(), offline=True)
    assert view.boxes() > 0
    assert "(worker)" in view.page.inner_text("#status")  # laid out in a Web Worker even from a file
    assert all(url.startswith("file:") or url.startswith("blob:") for url in view.requests), view.requests
    view.close()
