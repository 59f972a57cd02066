"""Benchmark: workhive-postgres per item, this checkout against another revision of the plugin, side by side.

    python bench/postgres_ab.py                    # against main's plugin, 6 rounds of 4,000 items
    python bench/postgres_ab.py --rev HEAD~1 --items 10000 --rounds 8
    python bench/postgres_ab.py --url 'postgresql://postgres@127.0.0.1:6432/test?pgbouncer=transaction'

The baseline is ``plugins/postgres/workhive_postgres`` as of ``--rev`` (``git
archive`` into a temporary directory, put first on PYTHONPATH); the core is this
checkout's for both. Each round starts both sides at the same moment, each in a
schema of its own, so both meet the same load on a shared machine (launch order
alternates between rounds); each side times ``claim`` + ``complete`` per item with
8 coroutines and ``complete_and_claim`` with 16. Printed: each round's rates and
ratio (this checkout / baseline), and the median ratio. ``--url`` runs this
checkout's side at another URL (a PgBouncer, say) and the baseline direct.
Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SERVER = os.environ.get("WORKHIVE_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
MODES = (("per8", 8, False), ("fused16", 16, True))


async def one_side(url: str, items: int) -> dict[str, float]:
    """Rates (items/s) of this process's workhive-postgres at ``url``, in a schema of its own."""
    import asyncpg
    from support.loops import claim_complete_loop

    import workhive

    schema = f"bench_ab_{uuid.uuid4().hex[:8]}"
    sep = "&" if "?" in url else "?"
    out: dict[str, float] = {}
    try:
        async with workhive.open(f"{url}{sep}schema={schema}&pool_size=32") as hive:
            for key, coroutines, fused in MODES:
                pool = hive.pool(key)
                for start in range(0, items, 10_000):
                    await pool.push_many([{"n": i} for i in range(start, min(items, start + 10_000))])
                t0 = time.perf_counter()
                loops = (claim_complete_loop(pool, f"w{i}", {"ok": True}, fused) for i in range(coroutines))
                done = sum(await asyncio.gather(*loops))
                out[key] = done / (time.perf_counter() - t0)
                assert done == items, (key, done)
    finally:
        conn = await asyncpg.connect(SERVER)
        try:
            await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        finally:
            await conn.close()
    return out


def baseline_tree(rev: str) -> Path:
    """``plugins/postgres/workhive_postgres`` as of ``rev``, unpacked into a temporary directory."""
    target = Path(tempfile.mkdtemp(prefix="workhive-ab-"))
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "plugins/postgres/workhive_postgres"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target / "plugins" / "postgres"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", default="main", help="the baseline revision of the plugin (default: main)")
    parser.add_argument("--items", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--url", default=SERVER, help="where this checkout's side runs (default: the server)")
    parser.add_argument("--side", help=argparse.SUPPRESS)  # internal: run one side, print its rates as JSON
    args = parser.parse_args()
    if args.side:
        print(json.dumps(asyncio.run(one_side(args.side, args.items))))
        return 0
    base = baseline_tree(args.rev)
    here_env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    base_env = dict(here_env, PYTHONPATH=os.pathsep.join([str(base), here_env["PYTHONPATH"]]))
    ratios: dict[str, list[float]] = {key: [] for key, _, _ in MODES}
    print(f"this checkout at {args.url.rsplit('@', 1)[-1]} against {args.rev}'s plugin, {args.items:,} items a side")
    for n in range(args.rounds):
        sides = [("baseline", base_env, SERVER), ("this", here_env, args.url)]
        if n % 2:
            sides.reverse()  # launch order alternates: neither side always starts first
        command = [sys.executable, __file__, "--items", str(args.items), "--side"]
        procs = {
            name: subprocess.Popen([*command, url], env=env, stdout=subprocess.PIPE, text=True)
            for name, env, url in sides
        }
        rates = {name: json.loads(proc.communicate()[0]) for name, proc in procs.items()}
        line = []
        for key, _, _ in MODES:
            ratio = rates["this"][key] / rates["baseline"][key]
            ratios[key].append(ratio)
            line.append(f"{key} {rates['baseline'][key]:,.0f} -> {rates['this'][key]:,.0f} items/s ({ratio:.2f}x)")
        print(f"round {n + 1}: " + "; ".join(line), flush=True)
    for key, _, _ in MODES:
        print(f"median ratio {key:<8} {statistics.median(ratios[key]):.2f}x  (rounds: "
              + ", ".join(f"{r:.2f}" for r in ratios[key]) + ")")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
