"""Benchmark: agents that resume. Durable steps (``ctx.step``) against the same handler without them, under SIGKILL.

    python bench/agents.py [--items 2000] [--engines sqlite,postgres,redis] [--kill-every 2]

Each item is an "agent": a sync handler making 5 sequential calls to a local
fake LLM API (``workhive.demo.fake_api.FakeLLMApi``, extended here with an
``/v1/agent-step`` route answering after 20-50 ms). One fleet of 2 worker
processes x 16 workers (``workhive work --processes 2 --concurrency 16``)
drains the items of each variant while a nemesis SIGKILLs a random worker
process every ``--kill-every`` seconds (the supervisor starts a replacement;
a kill waits until both processes are up again, since the supervisor spaces
frequent restarts up to 5 s apart and ends a fleet that restarts more than 30
times a minute):

The handlers are ``bench/support/agent_handlers.py``.

* ``steps``: every call is ``ctx.step("s<k>", call)``: a later claim replays
  finished calls from the hive and makes only the one in flight again;
* ``plain``: the same calls made directly (the baseline, same fleet, same
  moment, same API): a later claim starts the item from its first call.

Every call carries ``ctx.step_key("s<k>")`` as its ``Idempotency-Key``: the
API applies a call's side effect once per key (the dedup an idempotent API
does), so "side effects twice" counts keys applied more than once (a
``step_key`` that differed between claims would show here). The API counts
calls per (item, step) and records when each started and under which claim
(fencing token). Printed per engine and variant: items done, lost (not done
when the fleet ended), kills, calls, calls repeated (per kill, and per
interrupted claim: a claim that made calls and was followed by another that did), side
effects applied twice, and resume latency: from the kill that ended a claim
to the first call of the item's next claim, p50/p95 (the supervisor hands a
dead process's claims back at once, so this is not bounded by the lease).

PostgreSQL and Redis use the shared servers at 127.0.0.1 (a schema / key
prefix of their own, dropped afterwards); an engine whose server is absent is
skipped with the reason. Not a test: it prints numbers, it asserts nothing
about time.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# bench/ holds redis.py, postgres.py and sqlite.py: off the path, or `import redis` (the Redis plugin's driver,
# here and in the worker processes) finds the bench. The handlers live in bench/support/agent_handlers.py.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
HANDLERS = HERE / "support"
API_ENV = "BENCH_AGENTS_API"  # the fake API's address, for the handlers


# -- the fake API, with a route that counts calls per (item, step) --------------------------------------
class _Calls:
    """What the API saw: every call (pool-qualified item, step, token, start time) and side effects by key."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, int, int, float]] = []
        self.applied: Counter[str] = Counter()  # side effects applied per idempotency key (dedup: at most 1)
        self.seen_keys: Counter[str] = Counter()  # calls per key (without the dedup, each would apply)

    def clear(self) -> None:
        with self.lock:
            self.calls.clear()
            self.applied.clear()
            self.seen_keys.clear()


def start_api(calls: _Calls) -> Any:
    from http.server import BaseHTTPRequestHandler

    from workhive.demo.fake_api import FakeLLMApi

    class AgentApi(FakeLLMApi):
        """FakeLLMApi plus ``POST /v1/agent-step``: 20-50 ms per call, side effects once per Idempotency-Key."""

        def _handler_class(self) -> type[BaseHTTPRequestHandler]:
            base = super()._handler_class()

            class Handler(base):  # type: ignore[valid-type,misc]
                def do_POST(self) -> None:
                    if self.path != "/v1/agent-step":
                        super().do_POST()
                        return
                    started = time.time()
                    length = int(self.headers.get("Content-Length") or 0)
                    body = json.loads(self.rfile.read(length))
                    key = self.headers.get("Idempotency-Key", "")
                    with calls.lock:
                        calls.calls.append((body["item"], int(body["step"]), int(body["token"]), started))
                        calls.seen_keys[key] += 1
                    time.sleep(random.uniform(0.02, 0.05))  # the model thinking
                    with calls.lock:
                        if key not in calls.applied:  # the dedup: one effect per key, however many calls
                            calls.applied[key] += 1
                    try:
                        self._send(200, {"words": 7 + int(body["step"])})
                    except (BrokenPipeError, ConnectionResetError):
                        pass  # the caller's process was SIGKILLed mid-call: the nemesis at work

            return Handler

    api = AgentApi({}, latency=0.0)
    api._server.socket.listen(256)  # 32 workers connect at once: the default backlog of 5 would drop SYNs
    return api.start()


# -- engines ------------------------------------------------------------------------------------------
def _reachable(host: str, port: int) -> str | None:
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as exc:
        return f"not reachable at {host}:{port} ({exc})"
    return None


@contextmanager
def engine(name: str, tmp: Path) -> Iterator[str | None]:
    """The storage URL for ``name`` (None: skipped, the reason printed), cleaned up afterwards."""
    tag = f"bench_agents_{uuid.uuid4().hex[:10]}"
    if name == "sqlite":
        yield f"sqlite:///{tmp / 'agents.db'}"
    elif name == "postgres":
        problem = _reachable("127.0.0.1", 5432)
        if problem:
            print(f"{name:<9} skipped: PostgreSQL {problem}")
            yield None
            return
        try:
            yield f"postgresql://postgres@127.0.0.1:5432/test?schema={tag}"
        finally:
            _drop_schema(tag)
    elif name == "redis":
        problem = _reachable("127.0.0.1", 6379)
        if problem:
            print(f"{name:<9} skipped: Redis {problem}")
            yield None
            return
        try:
            yield f"redis://127.0.0.1:6379/0?prefix={tag}"
        finally:
            _drop_prefix(tag)
    else:
        raise SystemExit(f"unknown engine {name!r}: use sqlite, postgres or redis")


def _drop_schema(schema: str) -> None:
    import asyncpg

    async def drop() -> None:
        conn = await asyncpg.connect(host="127.0.0.1", port=5432, user="postgres", database="test")
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()

    asyncio.run(drop())


def _drop_prefix(prefix: str) -> None:
    import redis

    client = redis.Redis(host="127.0.0.1", port=6379)
    try:
        for pattern in (f"{{{prefix}}}*", f"{{{prefix}/*"):  # the prefix's own keys only (keys.py)
            keys = list(client.scan_iter(match=pattern, count=1000))
            if keys:
                client.delete(*keys)
    finally:
        client.close()


# -- one run --------------------------------------------------------------------------------------------
def push(url: str, pool: str, n: int) -> list[str]:
    import workhive

    async def go() -> list[str]:
        async with workhive.open(url) as hive:
            return await hive.pool(pool).push_many([{"i": i} for i in range(n)])

    return asyncio.run(go())


def states(url: str, pool: str, ids: list[str]) -> Counter[str]:
    import workhive

    async def go() -> Counter[str]:
        async with workhive.open(url, create=False) as hive:
            found = Counter[str]()
            for item_id in ids:
                found[(await hive.pool(pool).get(item_id)).state.value] += 1
            return found

    return asyncio.run(go())


def run_fleet(
    url: str, pool: str, handler: str, api_url: str, kill_every: float, lease: float, cwd: Path
) -> list[float]:
    """Drain ``pool`` with 2 processes x 16 workers while SIGKILLing a random worker process; the kill times."""
    from workhive.testing.processes import children_of

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HANDLERS), env.get("PYTHONPATH", "")]))
    env[API_ENV] = api_url
    fleet = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "workhive",
            "--storage",
            url,
            "work",
            pool,
            "--handler",
            handler,
            "--processes",
            "2",
            "--concurrency",
            "16",
            "--lease",
            str(lease),
            "--heartbeat",
            str(lease / 5),
            "--max-attempts",
            "50",
            "--until-empty",
            "--progress",
            "none",
            "--json",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )  # fmt: skip  (cwd: the fleet's default lock files go there, not into the checkout)
    kills: list[float] = []
    rng = random.Random(27)
    next_kill = time.monotonic() + kill_every
    try:
        while fleet.poll() is None:
            time.sleep(0.02)
            if time.monotonic() < next_kill:
                continue
            victims = children_of(fleet.pid)
            if len(victims) < 2:
                # A replacement is still on its way: the supervisor spaces restarts that come often (up to
                # 5 s apart), so killing now would leave the fleet with no workers, or end it (more than 30
                # restarts a minute is a crash loop to it). The kill waits for both processes.
                continue
            next_kill = time.monotonic() + kill_every
            with _ignore_gone():
                os.kill(rng.choice(victims), signal.SIGKILL)
                kills.append(time.time())
        _out, err = fleet.communicate(timeout=60)
    finally:
        if fleet.poll() is None:
            fleet.kill()
            fleet.communicate()
    if fleet.returncode != 0:
        print(f"  the fleet exited {fleet.returncode}: {err[-2000:]}", file=sys.stderr)
    return kills


@contextmanager
def _ignore_gone() -> Iterator[None]:
    try:
        yield
    except ProcessLookupError:  # it ended between the listing and the kill
        pass


def _pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def measure(calls: _Calls, ids: set[str], kills: list[float]) -> tuple[int, int, int, int, int, list[float]]:
    """(calls, repeated calls, interruptions, keys applied twice, keys called twice, resume latencies).

    An interruption is a claim of an item that made calls and was followed by another claim that made calls.
    """
    with calls.lock:
        mine = [c for c in calls.calls if c[0] in ids]
        applied_twice = sum(1 for n in calls.applied.values() if n > 1)
    per_step = Counter((item, step) for item, step, _, _ in mine)
    repeated = sum(n - 1 for n in per_step.values())
    by_item: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for item, _, token, started in mine:
        by_item[item][token].append(started)
    interrupted = 0
    resumes: list[float] = []
    for tokens in by_item.values():
        ordered = sorted(tokens)
        if len(ordered) < 2:
            continue
        interrupted += len(ordered) - 1
        for before, after in itertools.pairwise(ordered):
            last, first = max(tokens[before]), min(tokens[after])
            # the kill that ended the earlier claim: the latest one before the next claim's first call
            ended = [k for k in kills if last - 0.1 <= k <= first]
            if ended:
                resumes.append(first - ended[-1])
    called_twice = sum(1 for n in per_step.values() if n > 1)
    return len(mine), repeated, interrupted, applied_twice, called_twice, resumes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=2000, help="items per variant and engine [2000]")
    parser.add_argument("--engines", default="sqlite,postgres,redis", help="comma-separated [sqlite,postgres,redis]")
    parser.add_argument("--kill-every", type=float, default=2.0, help="seconds between SIGKILLs [2]")
    parser.add_argument("--lease", type=float, default=5.0, help="the fleet's lease in seconds [5]")
    args = parser.parse_args()
    calls = _Calls()
    api = start_api(calls)
    try:
        for name in [e.strip() for e in args.engines.split(",") if e.strip()]:
            with tempfile.TemporaryDirectory() as tmp, engine(name, Path(tmp)) as url:
                if url is None:
                    continue
                results = {}
                for variant, handler in (("steps", "agent_handlers:with_steps"), ("plain", "agent_handlers:plain")):
                    pool = f"agents-{variant}"
                    ids = push(url, pool, args.items)
                    calls.clear()  # item ids repeat across engines (each hive numbers its own): count per run
                    kills = run_fleet(url, pool, handler, api.url, args.kill_every, args.lease, Path(tmp))
                    found = states(url, pool, ids)
                    total, repeated, interrupted, twice, called_twice, resumes = measure(calls, set(ids), kills)
                    results[variant] = repeated / max(1, interrupted)
                    print(
                        f"{name:<9} {variant:<6} items {len(ids)}  done {found['done']}  "
                        f"lost {len(ids) - found['done']}  kills {len(kills)}  calls {total}  "
                        f"repeated {repeated} ({repeated / max(1, len(kills)):.1f}/kill, "
                        f"{repeated / max(1, interrupted):.2f}/interrupted claim, {interrupted} interrupted)  "
                        f"side effects applied twice {twice} (calls with one key made twice: {called_twice})  "
                        f"resume p50 {_pct(resumes, 0.5):.2f}s p95 {_pct(resumes, 0.95):.2f}s (lease {args.lease:g}s)",
                        flush=True,
                    )
                if results["plain"]:
                    print(
                        f"{name:<9} repeated calls per interrupted claim, steps/plain: "
                        f"{results['steps'] / results['plain']:.2f}x",
                        flush=True,
                    )
    finally:
        api.stop()


if __name__ == "__main__":
    main()
