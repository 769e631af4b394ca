"""Screenshots of `anneal viz` for the docs: docs/screenshots/viz-*.png, from an exported page.

    anneal viz nanogpt --preset tiny --backward --device cpu --export /tmp/step.html
    python scripts/viz_screenshots.py /tmp/step.html   # needs playwright and Debian's chromium
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

OUT = Path(__file__).resolve().parent.parent / "docs" / "screenshots"


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
        passes = page.evaluate("window.annealViz.doc.passes.findIndex(p => Object.keys(p.rules).length && p.nodes_out !== undefined && p.nodes_out <= 150)")
        page.locator("#pass-slider").fill(str(max(passes, 0)))
        page.wait_for_timeout(800)
        page.screenshot(path=OUT / "viz-kernel-and-pass.png")
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1])
