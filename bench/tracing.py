"""Benchmark: what tracing costs an item's push, claim and completion, against the same loop untraced.

    python bench/tracing.py [--items 20000] [--runs 3]

Each variant runs in a fresh interpreter (opentelemetry, once imported, stays
imported), one after another, ``--runs`` times, on the memory backend through
the public ``Pool`` API (push, claim, complete one item at a time):

* baseline: opentelemetry never imported (what every user without the extra pays);
* api only: opentelemetry imported, no SDK configured (no-op provider: nothing recorded);
* sdk: the SDK with a simple span processor into its in-memory exporter, every
  push inside a request span (each item carries its trace context; push and
  claim spans are recorded).

Prints items/s per variant (median over the runs) and each one's ratio to the
baseline measured in the same run. Needs opentelemetry-sdk.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap

VARIANT = textwrap.dedent(
    """
    import asyncio, json, sys, time
    variant, items = sys.argv[1], int(sys.argv[2])
    request = None
    if variant != "baseline":
        from opentelemetry import trace
    if variant == "sdk":
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
        trace.set_tracer_provider(provider)
        request = trace.get_tracer("bench").start_span("request")
    import workhive

    async def main():
        async with workhive.open("memory://") as hive:
            pool = hive.pool("jobs")
            started = time.perf_counter()
            for n in range(items):
                await pool.push({"n": n})
                item = await pool.claim("w")
                await pool.complete(item, None)
            return time.perf_counter() - started

    if request is not None:
        from opentelemetry import trace
        with trace.use_span(request, end_on_exit=True):
            seconds = asyncio.run(main())
    else:
        seconds = asyncio.run(main())
    print(json.dumps({"seconds": seconds, "otel": "opentelemetry" in sys.modules}))
    """
)

VARIANTS = ("baseline", "api only", "sdk")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    try:
        import opentelemetry.sdk  # noqa: F401
    except ImportError:
        sys.exit("bench/tracing.py needs opentelemetry-sdk (pip install opentelemetry-sdk)")
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(args.runs):
        for variant in VARIANTS:  # interleaved, so a busy spell on the machine touches every variant alike
            name = {"api only": "api"}.get(variant, variant)
            done = subprocess.run(
                [sys.executable, "-c", VARIANT, name, str(args.items)], capture_output=True, text=True, check=True
            )
            result = json.loads(done.stdout)
            assert result["otel"] == (variant != "baseline"), result
            times[variant].append(result["seconds"])
    base = statistics.median(times["baseline"])
    print(f"push + claim + complete, one item at a time, memory backend, {args.items:,} items, {args.runs} runs")
    for variant in VARIANTS:
        seconds = statistics.median(times[variant])
        print(
            f"  {variant:<9} {args.items / seconds:>10,.0f} items/s  "
            f"({seconds / base:.2f}x the baseline's time per item)"
        )


if __name__ == "__main__":
    main()
