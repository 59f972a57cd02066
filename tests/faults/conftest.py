"""The fault suite's engines, private servers, profile, seed, and the per-engine summary at the end.

Engines: every scenario runs on each engine in ``WORKHIVE_FAULTS_ENGINES``
(default ``sqlite,postgres,redis``). PostgreSQL and Redis are private servers
this suite starts on free ports (once per session, each scenario in a schema or
key prefix of its own) and may kill; the shared servers are never used. A
missing server binary skips its scenarios with the reason, except under
``WORKHIVE_REQUIRE_SERVICES=1``, where it fails them.

Profile: ``WORKHIVE_FAULTS_PROFILE=default`` (``make test``) or ``soak``.
Seed: ``WORKHIVE_FAULTS_SEED=N`` replays a run; otherwise each scenario draws
one, and prints it, and its failure message names it.
"""

from __future__ import annotations

import collections
import os
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .drill import Profile
from .engines import ENGINES, Target, make_target
from .servers import PrivatePostgres, PrivateRedis

#: per engine: scenarios run, faults injected by kind, items checked, problems found
SUMMARY: dict[str, dict[str, Any]] = {}


def selected_engines() -> list[str]:
    chosen = [e.strip() for e in os.environ.get("WORKHIVE_FAULTS_ENGINES", ",".join(ENGINES)).split(",") if e.strip()]
    unknown = sorted(set(chosen) - set(ENGINES))
    if unknown:
        raise pytest.UsageError(f"WORKHIVE_FAULTS_ENGINES names {unknown}; choose from {', '.join(ENGINES)}")
    return chosen


@pytest.fixture(scope="session")
def profile() -> Profile:
    try:
        return Profile.from_env()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.fixture
def seed() -> int:
    value = os.environ.get("WORKHIVE_FAULTS_SEED")
    return int(value) if value else random.SystemRandom().randrange(1, 2**31)


@pytest.fixture(scope="session")
def _servers() -> Iterator[dict[str, Any]]:
    started: dict[str, Any] = {}
    try:
        yield started
    finally:
        for server in started.values():
            server.stop()


def _server(engine: str, started: dict[str, Any]) -> PrivatePostgres | PrivateRedis | None:
    if engine == "sqlite":
        return None
    if engine not in started:
        server: PrivatePostgres | PrivateRedis
        if engine == "postgres":
            server = PrivatePostgres()
        else:
            server = PrivateRedis(Path(tempfile.mkdtemp(prefix="workhive-faults-redis-")))
        server.start()
        started[engine] = server
    server = started[engine]
    if server.process is None or server.process.poll() is not None:
        server.start()  # a scenario that failed midway may have left it down
    return server  # type: ignore[no-any-return]


@pytest.fixture
def target(request: pytest.FixtureRequest, tmp_path: Path, _servers: dict[str, Any]) -> Iterator[Target]:
    engine: str = request.param
    made = make_target(engine, tmp_path, _server(engine, _servers))
    try:
        yield made
    finally:
        made.close()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "target" in metafunc.fixturenames:
        engines = selected_engines()
        wanted = getattr(metafunc.function, "engines", ENGINES)
        metafunc.parametrize("target", [e for e in engines if e in wanted], indirect=True)


def record(engine: str, scenario: str, injected: collections.Counter[str], items: int, problems: int) -> None:
    """Add one scenario's numbers to the summary printed at the end of the session."""
    row = SUMMARY.setdefault(
        engine, {"scenarios": 0, "failed": 0, "items": 0, "faults": collections.Counter(), "problems": 0}
    )
    row["scenarios"] += 1
    row["failed"] += 1 if problems else 0
    row["items"] += items
    row["faults"].update(injected)
    row["problems"] += problems


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not SUMMARY:
        return
    terminalreporter.section("fault suite: per engine")
    for engine in ENGINES:
        row = SUMMARY.get(engine)
        if row is None:
            continue
        faults = ", ".join(f"{name} {count}" for name, count in sorted(row["faults"].items())) or "none"
        terminalreporter.write_line(
            f"{engine}: {row['scenarios']} scenario(s), {row['failed']} failing; {row['items']} items checked; "
            f"{row['problems']} problem(s); faults injected: {faults}"
        )
