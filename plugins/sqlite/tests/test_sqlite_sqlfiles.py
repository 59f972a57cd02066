"""The SQL files: each migration a numbered file shipped with the package, split as SQLite reads statements."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import pytest

from workhive_sqlite.schema import SCHEMA_VERSION
from workhive_sqlite.sqlfiles import migrations, statements


def test_the_version_is_the_number_of_migration_files_and_they_run_1_to_n() -> None:
    assert [version for version, _ in migrations()] == list(range(1, SCHEMA_VERSION + 1))
    names = sorted(entry.name for entry in (files("workhive_sqlite") / "sql" / "migrations").iterdir())
    assert [int(name[:4]) for name in names if name.endswith(".sql")] == list(range(1, SCHEMA_VERSION + 1))


def test_the_migration_files_are_package_data() -> None:
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python >= 3.11")
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    package_data = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    root = files("workhive_sqlite")
    shipped = {
        str(path.relative_to(Path(str(root))))
        for pattern in package_data["workhive_sqlite"]
        for path in Path(str(root)).glob(pattern)
    }
    migration_files = {f"sql/migrations/{entry.name}" for entry in (root / "sql" / "migrations").iterdir()}
    assert migration_files and migration_files <= shipped


def test_statements_end_where_sqlite_says_and_keep_semicolons_in_strings_and_comments() -> None:
    script = (
        "-- a comment; with a semicolon\n"
        "CREATE TABLE t (x TEXT DEFAULT 'a;b');\n"
        "\n"
        "INSERT INTO t (x)\n    VALUES ('c');\n"
        "-- trailing comment\n"
    )
    assert statements(script) == (
        "-- a comment; with a semicolon\nCREATE TABLE t (x TEXT DEFAULT 'a;b')",
        "INSERT INTO t (x)\n    VALUES ('c')",
    )


def test_an_unfinished_statement_in_a_file_is_refused_naming_it() -> None:
    with pytest.raises(RuntimeError, match="unfinished statement: 'DROP TABLE t'"):
        statements("CREATE TABLE t (x);\nDROP TABLE t\n")
