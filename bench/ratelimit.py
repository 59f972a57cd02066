"""Rate limits: a fleet against 3 rate-limited keys, four ways, in one run.

    python bench/ratelimit.py [--seconds 30] [--rate 20] [--processes 3] [--concurrency 16]

A local fake LLM API (``workhive.demo.fake_api``) allows each of 3 keys
``--rate`` calls per second (a token bucket holding one second's worth). A
fleet of ``--processes`` × ``--concurrency`` workers (``workhive work`` on a
fresh SQLite hive, far more items than the keys allow) calls it for
``--seconds``, counted from the API's first request, in each mode:

  (a) cooldowns   today's reactive behaviour: a 429 cools the key fleet-wide for Retry-After
  (b) aiolimiter  a per-process ``aiolimiter.AsyncLimiter`` per key at the key's limit, as users write it
                  (bench-only dependency: ``pip install aiolimiter``)
  (c) known       fleet budgets with the limits given (``env:KEY?rpm=…``)
  (d) learned     fleet budgets learning the limits (``--learn-limits``), no limits given

For each: successful calls as a fraction of the keys' combined capacity in
the window (3 × rate × seconds, plus the second's worth each key's bucket
holds at the start), and 429s as a fraction of all calls.
Target (issue 16): known ≥ 95% with ≤ 0.5% 429s; learned ≥ 85% with ≤ 5%.

This module is also the fleet's handler module (``ratelimit:call``,
``ratelimit:call_aiolimiter``): the bench puts its own directory on the
workers' PYTHONPATH.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from support.peers import peers_line

KEY_PREFIX = "BENCH_RATELIMIT_KEY"
POOL = "ratelimit"
_limiters: dict[str, Any] = {}


async def call(ctx: Any) -> Any:
    """The demo's handler: one call to the fake API with the leased key (429 → RateLimited)."""
    from workhive.demo.handler import summarise

    return await summarise(ctx)


async def call_aiolimiter(ctx: Any) -> Any:
    """(b): the same call behind this process's own limiter for the key, set to the key's limit."""
    from aiolimiter import AsyncLimiter

    name = ctx.credential.name
    limiter = _limiters.get(name)
    if limiter is None:
        limiter = _limiters[name] = AsyncLimiter(float(os.environ["BENCH_RATELIMIT_RATE"]), 1.0)
    async with limiter:
        return await call(ctx)


def _run_mode(mode: str, args: argparse.Namespace, root: Path) -> tuple[float, float, int, int]:
    """One fleet run; returns (successes / capacity, 429s / calls, calls, 429s) over the window."""
    import workhive
    from workhive.demo.fake_api import FakeLLMApi
    from workhive.demo.handler import API_URL_ENV
    from workhive.runtime import FleetOptions, run_fleet

    directory = Path(tempfile.mkdtemp(prefix=f"{mode}-", dir=root))
    storage = f"sqlite:///{directory / 'hive.db'}"
    names = [f"{KEY_PREFIX}_{i}" for i in (1, 2, 3)]
    keys = {name: f"sk-bench-{secrets.token_hex(8)}" for name in names}
    spec = f"env:{KEY_PREFIX}"
    if mode == "known":
        spec += f"?rpm={args.rate * 60}"
    handler = "ratelimit:call_aiolimiter" if mode == "aiolimiter" else "ratelimit:call"
    items = int(3 * args.rate * args.seconds * 3 + 1000)

    async def push() -> None:
        async with workhive.open(storage) as hive:
            await hive.pool(POOL).push_many([{"text": f"Document {i}. It says things."} for i in range(items)])

    window: dict[str, Any] = {}
    with FakeLLMApi({v: k for k, v in keys.items()}, rate=args.rate, window=1.0, latency=args.latency) as api:
        os.environ.update(keys)
        os.environ[API_URL_ENV] = api.url
        os.environ["BENCH_RATELIMIT_RATE"] = str(args.rate)
        os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])
        asyncio.run(push())

        def measure() -> None:
            # The window starts at the API's first request, so process start-up is not counted against anyone.
            while sum(s["requests"] for s in api.stats_json().values()) == 0:
                time.sleep(0.005)
            window["start"] = api.stats_json()
            time.sleep(args.seconds)
            window["end"] = api.stats_json()
            os.kill(os.getpid(), signal.SIGTERM)  # the supervisor drains the fleet

        watcher = threading.Thread(target=measure, daemon=True)
        watcher.start()
        run_fleet(
            FleetOptions(
                pool=POOL,
                handler=handler,
                storage=storage,
                locks=f"fcntl:///{directory / 'locks'}",
                credentials=(spec,),  # type: ignore[arg-type]
                processes=args.processes,
                concurrency=args.concurrency,
                lease=60.0,
                heartbeat=5.0,
                grace=5.0,
                max_rate_limit_retries=10_000,
                progress=os.environ.get("BENCH_PROGRESS", "none"),  # type: ignore[arg-type]
                learn_limits=mode == "learned",
            )
        )
        watcher.join(timeout=5)
    start, end = window["start"], window["end"]
    ok = sum(end[k]["ok"] - start[k]["ok"] for k in end)
    calls = sum(end[k]["requests"] - start[k]["requests"] for k in end)
    limited = sum(end[k]["rate_limited"] - start[k]["rate_limited"] for k in end)
    capacity = 3 * args.rate * (args.seconds + 1.0)  # each key's bucket starts full: one second's worth more
    return ok / capacity, (limited / calls if calls else 0.0), calls, limited


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=int, default=20, help="calls per second each key allows")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds the fake API takes per call")
    parser.add_argument("--modes", default="cooldowns,aiolimiter,known,learned")
    args = parser.parse_args()
    print(peers_line("aiolimiter"), flush=True)
    try:
        import aiolimiter  # noqa: F401
    except ImportError:
        sys.exit("bench/ratelimit.py needs aiolimiter for mode (b): pip install aiolimiter")
    print(
        f"ratelimit: 3 keys × {args.rate}/s, {args.processes} processes × {args.concurrency} workers, "
        f"{args.seconds:g}s window from the first call, fake API latency {args.latency * 1000:g} ms"
    )
    labels = {
        "cooldowns": "(a) cooldowns ",
        "aiolimiter": "(b) aiolimiter",
        "known": "(c) known     ",
        "learned": "(d) learned   ",
    }
    with tempfile.TemporaryDirectory(prefix="workhive-bench-ratelimit-") as tmp:
        for mode in args.modes.split(","):
            capacity, limited, calls, n429 = _run_mode(mode, args, Path(tmp))
            print(
                f"{labels[mode]}  successes {capacity:6.1%} of capacity   429s {limited:6.2%} of calls "
                f"({n429} of {calls})",
                flush=True,
            )


if __name__ == "__main__":
    main()
