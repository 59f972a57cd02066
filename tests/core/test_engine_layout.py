"""Every storage engine has the folder CONTRIBUTING.md shows: the same files, and tests named the same way.

These read the checkout (``plugins/<engine>/``), not an installed package, so
they run in the core env too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"

#: engine -> (package, its name in test classes)
ENGINES = {
    "memory": ("workhive_memory", "Memory"),
    "sqlite": ("workhive_sqlite", "Sqlite"),
    "postgres": ("workhive_postgres", "Postgres"),
    "redis": ("workhive_redis", "Redis"),
}

#: Every engine has these.
REQUIRED = {"__init__.py", "plugin.py", "url.py", "backend.py", "budget.py", "failures.py", "schedules.py", "py.typed"}
#: What an engine has only where it has the concern (CONTRIBUTING's table says which engine lacks which).
WHERE_NEEDED = {"failures.py", "schema.py", "sqlfiles.py", "luafiles.py"}
OPTIONAL = {"clock.py", "connections.py", "tls.py", "wakeups.py", "locks.py"}
#: Engine-specific modules, named for what they hold (CONTRIBUTING's "extra" row).
EXTRA = {
    "memory": {"items.py", "groups.py"},
    "sqlite": {"ops.py", "groups.py", "gate.py"},
    "postgres": set(),
    "redis": {"keys.py", "cluster.py", "sentinel.py"},
}
#: Which of WHERE_NEEDED each engine must have.
CONCERNS = {
    "memory": {"failures.py"},
    "sqlite": {"failures.py", "schema.py", "sqlfiles.py"},
    "postgres": {"failures.py", "schema.py", "sqlfiles.py"},
    "redis": {"failures.py", "schema.py", "luafiles.py"},
}

_SUITE_CLASS = re.compile(
    r"Test(?P<engine>[A-Z][a-z]+)(?P<variant>[A-Za-z]*?)(?P<suite>Budget|Lock)?(?:Stateful)?Contract"
)


def _package(engine: str) -> Path:
    return PLUGINS / engine / ENGINES[engine][0]


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_the_engine_has_every_required_file_and_only_files_the_layout_names(engine: str) -> None:
    files = {p.name for p in _package(engine).iterdir() if p.is_file()}
    assert REQUIRED <= files, f"{engine} lacks {sorted(REQUIRED - files)}"
    assert CONCERNS[engine] <= files, f"{engine} lacks {sorted(CONCERNS[engine] - files)}"
    unknown = files - REQUIRED - WHERE_NEEDED - OPTIONAL - EXTRA[engine]
    assert not unknown, f"{engine} has modules the layout in CONTRIBUTING.md does not name: {sorted(unknown)}"


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_a_schema_keeps_its_statements_in_files_shipped_with_the_package(engine: str) -> None:
    package = _package(engine)
    if not (package / "schema.py").exists():
        pytest.skip(f"{engine} has no schema")
    pyproject = (PLUGINS / engine / "pyproject.toml").read_text(encoding="utf-8")
    if (package / "luafiles.py").exists():  # scripts, one file per command
        assert sorted(package.glob("lua/*.lua")), f"{engine}'s schema has no lua/*.lua"
        assert '"lua/*.lua"' in pyproject, f"{engine}'s pyproject.toml does not ship its scripts"
        return
    migrations = sorted(p.name for p in (package / "sql" / "migrations").glob("*.sql"))
    assert migrations, f"{engine}'s schema has no sql/migrations/NNNN_*.sql"
    assert all(re.fullmatch(r"\d{4}_[a-z0-9_]+\.sql", name) for name in migrations), migrations
    assert '"sql/migrations/*.sql"' in pyproject, f"{engine}'s pyproject.toml does not ship its migrations"
    # Statements live in sql/queries.sql, read by workhive.sqlfiles, never in Python strings.
    assert (package / "sql" / "queries.sql").is_file(), f"{engine}'s schema has no sql/queries.sql"
    assert '"sql/*.sql"' in pyproject, f"{engine}'s pyproject.toml does not ship sql/queries.sql"


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_test_files_helpers_and_suite_classes_follow_the_naming_scheme(engine: str) -> None:
    tests = PLUGINS / engine / "tests"
    name = ENGINES[engine][1]
    for path in sorted(tests.glob("*.py")):
        if path.name.startswith("test_"):
            assert path.name.startswith(f"test_{engine}_"), f"{path.name}: test files are test_{engine}_<what>.py"
        else:
            assert path.name in {"conftest.py", "__init__.py"} or path.name.startswith(f"{engine}_"), (
                f"{path.name}: helpers are {engine}_<what>.py"
            )
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
            runs_a_suite = any(base.endswith("Contract") for base in bases)
            if runs_a_suite:
                match = _SUITE_CLASS.fullmatch(node.name)
                assert match and match.group("engine") == name, (
                    f"{path.name}: {node.name} runs a suite: Test{name}[Variant][Budget|Lock][Stateful]Contract"
                )
