"""How fast `anneal viz` opens a big step: nanogpt `full` with gradients, in headless Chromium.

    python benchmarks/bench_viz.py [--model nanogpt --preset full]   # needs playwright and Debian's chromium

Prints the step document's size, the time from navigation to the first drawn layout (the issue asks for
under 2 s), the layout's own time in its Web Worker, and the time to open the largest module.
No peer runs the same page, so there is no ratio: these are absolute times on the machine that runs it.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="nanogpt")
    parser.add_argument("--preset", default="full")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or sys.exit("needs Debian's chromium")
    page_file = Path(tempfile.mkdtemp()) / "step.html"
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "anneal_cli.main", "viz", args.model, "--preset", args.preset, "--backward",
                    "--device", "cpu", "--export", str(page_file)], check=True)  # fmt: skip
    print(f"export: {time.perf_counter() - started:.1f} s (build, schedule, compile, record); "
          f"{page_file.stat().st_size / 1e6:.1f} MB page")  # fmt: skip
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        for run in range(args.repeat):
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            t0 = time.perf_counter()
            page.goto(page_file.as_uri())
            page.wait_for_selector("body[data-ready='1']", timeout=60_000)
            opened = time.perf_counter() - t0
            status = page.inner_text("#status")
            page.evaluate("document.body.dataset.ready = '0'")
            t1 = time.perf_counter()
            page.locator("#viewport g.unit.group").first.click()
            page.wait_for_selector("body[data-ready='1']", timeout=60_000)
            expand = time.perf_counter() - t1
            print(f"run {run + 1}: opened in {opened:.2f} s ({status}); a module opened in {expand:.2f} s "
                  f"({page.inner_text('#status')})")  # fmt: skip
            page.close()
        browser.close()


if __name__ == "__main__":
    main()
