"""Screenshots for the docs: docs/screenshots/viz-*.png from an exported viz page, and web-<view>.png of each
studio view served from a runs folder (needs playwright and Debian's chromium).

    anneal viz nanogpt --preset tiny --backward --device cpu --export /tmp/step.html
    anneal web 127.0.0.1:8766 --runs runs --no-open &
    python scripts/screenshots.py /tmp/step.html http://127.0.0.1:8766 RUN_NAME
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

OUT = Path(__file__).resolve().parent.parent / "docs" / "screenshots"


VIEWS = [
    "studio",
    "visualize?model=mlp&preset=tiny",
    "kernels?model=mlp&preset=tiny",
    "explain?op=exp2",
    "train",
    "generate?run={run}&prompt=ROMEO&max_tokens=60",
    "history",
    "doctor",
]


def studio(base: str, run: str) -> None:
    chromium = shutil.which("chromium") or sys.exit("needs Debian's chromium (apt-get install chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1300, "height": 800})
        for view in VIEWS:
            page.goto(f"{base}/{view.format(run=run)}")
            page.wait_for_selector("main, body[data-ready='1']")
            page.wait_for_timeout(1500)
            page.screenshot(path=OUT / f"web-{view.split('?')[0]}.png")
        browser.close()


def main(page_file: str) -> None:
    chromium = shutil.which("chromium") or sys.exit("needs Debian's chromium (apt-get install chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 860})
        page.goto(Path(page_file).resolve().as_uri())
        page.wait_for_selector("body[data-ready='1']")
        page.screenshot(path=OUT / "viz-overview.png")
        page.evaluate("document.body.dataset.ready = '0'")
        page.locator("#viewport g.unit.group").first.click()  # open the largest module
        page.wait_for_selector("body[data-ready='1']")
        page.locator("#viewport g.unit.node").nth(3).click()
        page.wait_for_timeout(500)
        page.screenshot(path=OUT / "viz-inspector.png")
        link = page.locator("#inspector a.kernel-link")
        if link.count():
            link.first.click()
            page.wait_for_timeout(500)
        small_pass = "p => Object.keys(p.rules).length && p.nodes_out !== undefined && p.nodes_out <= 150"
        passes = page.evaluate(f"window.annealViz.doc.passes.findIndex({small_pass})")
        page.locator("#pass-slider").fill(str(max(passes, 0)))
        page.wait_for_timeout(800)
        page.screenshot(path=OUT / "viz-kernel-and-pass.png")
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1])
    if len(sys.argv) > 3:
        studio(sys.argv[2], sys.argv[3])
