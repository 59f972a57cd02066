"""Benchmark: the dashboard's page weight and time to first render against a hive of 100,000 items.

    python bench/dashboard.py [--items 100000] [--runs 5]

Builds a SQLite hive with ``--items`` items (1% poisoned with an error text,
some done, the rest pending), serves the dashboard on a free loopback port and
loads it in headless Chromium (Debian's package, driven by Playwright). Prints:

* page weight: bytes of the page's HTML, scripts and stylesheets as served
  (the chart library's share named), and bytes the browser transferred for
  them plus the first overview and history answers;
* time to first render: navigation start → the pools table shows the pool
  (the page marks it with ``performance.mark``), median over ``--runs`` fresh page loads; and first
  contentful paint;
* the baseline, measured in the same run: one bare ``GET /api/overview``
  from Python (what any client must wait for), and the ratio of the first
  render to it.

Needs ``workhive-dashboard[testing]`` and ``/usr/bin/chromium``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import workhive


async def build(url: str, n: int) -> None:
    async with workhive.open(url, max_attempts=1) as hive:
        pool = hive.pool("summaries")
        for start in range(0, n, 10_000):
            await pool.push_many(
                [{"doc": i, "url": f"https://example.com/{i}"} for i in range(start, min(n, start + 10_000))]
            )
        claimed = await pool.claim_many(n // 50, "bench")
        half = len(claimed) // 2
        await pool.complete_many([(item, {"ok": True}) for item in claimed[:half]])
        for item in claimed[half:]:
            await pool.fail(item, "RuntimeError: upstream said 500 Internal Server Error", poison=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    try:
        import uvicorn
        from playwright.sync_api import sync_playwright

        from workhive_dashboard import DashboardSettings, create_app
        from workhive_dashboard.serve import bind
    except ImportError as exc:
        sys.exit(f"bench/dashboard.py needs workhive-dashboard[testing]: {exc}")

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'hive.db'}"
        t0 = time.perf_counter()
        asyncio.run(build(url, args.items))
        print(f"hive: {args.items:,} items built in {time.perf_counter() - t0:.1f}s ({url.rsplit('/', 1)[-1]})")

        sock = bind("127.0.0.1", 0)
        port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(create_app(DashboardSettings(storage=url)), log_level="warning"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        base = f"http://127.0.0.1:{port}/"
        try:
            urllib.request.urlopen(base + "api/overview", timeout=60).read()  # warm: the hive is opened
            static = ("dashboard.js", "dashboard.css", "uplot.min.js", "uplot.min.css")
            sizes = {name: len(urllib.request.urlopen(base + "static/" + name, timeout=60).read()) for name in static}
            sizes["index.html"] = len(urllib.request.urlopen(base, timeout=60).read())
            api_times = []
            api_bytes = 0
            for _ in range(args.runs):
                t = time.perf_counter()
                api_bytes = len(urllib.request.urlopen(base + "api/overview", timeout=60).read())
                api_times.append(time.perf_counter() - t)
            with sync_playwright() as p:
                browser = p.chromium.launch(
                    executable_path="/usr/bin/chromium",
                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                          "--disable-component-update", "--disable-sync", "--no-first-run"],
                )  # fmt: skip
                renders, paints, weights = [], [], []
                for _ in range(args.runs):
                    page = browser.new_page()
                    t = time.perf_counter()
                    page.goto(base)
                    page.locator("#pools tbody tr", has_text="summaries").wait_for(timeout=60_000)
                    wall = time.perf_counter() - t
                    mark = page.evaluate("performance.getEntriesByName('workhive-first-render')[0]?.startTime ?? null")
                    renders.append(wall if mark is None else mark / 1000)
                    fcp = page.evaluate("performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? null")
                    if fcp is not None:
                        paints.append(fcp / 1000)
                    weights.append(
                        page.evaluate(
                            "(() => { const nav = performance.getEntriesByType('navigation')[0];"
                            " return nav.transferSize + performance.getEntriesByType('resource')"
                            ".reduce((s, r) => s + r.transferSize, 0); })()"
                        )
                    )
                    page.close()
                browser.close()
        finally:
            server.should_exit = True
            thread.join(timeout=30)
    api = statistics.median(api_times)
    render = statistics.median(renders)
    chart_lib = sizes["uplot.min.js"] + sizes["uplot.min.css"]
    print(
        f"page weight: {sum(sizes.values()):,} bytes HTML+JS+CSS as served "
        f"({sizes['index.html']:,} HTML, {sizes['dashboard.js'] + sizes['uplot.min.js']:,} JS, "
        f"{sizes['dashboard.css'] + sizes['uplot.min.css']:,} CSS; the uPlot chart library {chart_lib:,} of it)"
    )
    print(f"transferred: {statistics.median(weights) / 1024:.1f} KiB (page, scripts, styles, first overview/history)")
    print(f"overview JSON: {api_bytes / 1024:.1f} KiB")
    if paints:
        print(f"first contentful paint: p50 {statistics.median(paints) * 1000:.0f} ms")
    print(f"time to first render (pools table filled): p50 {render * 1000:.0f} ms over {args.runs} loads")
    print(f"baseline bare GET /api/overview: p50 {api * 1000:.1f} ms; first render = {render / api:.1f}x that call")


if __name__ == "__main__":
    main()
