"""``workhive.sqlfiles``: named statements and fragments, the reader of every SQL engine's ``sql/*.sql``."""

from __future__ import annotations

import re

import pytest

from workhive.sqlfiles import parse, read


def test_statements_are_read_by_name_without_comments_or_semicolons() -> None:
    text = "-- a file's preamble\n\n-- one --\n-- what it does\nSELECT 1;\n\n-- two_lines --\nSELECT x\nFROM t\n"
    assert parse(text) == {"one": "SELECT 1", "two_lines": "SELECT x\nFROM t"}


def test_a_fragment_fills_in_its_values_with_the_indentation_of_its_use() -> None:
    text = (
        "-- fragment: pick --\nSELECT x\nFROM t\n    {only_if}\nLIMIT {limit}\n\n"
        "-- a --\n@pick(limit=$2, only_if=)\n\n-- b --\nWITH c AS (\n  @pick(limit=$3, only_if=WHERE y)\n)\nTABLE c;\n"
    )
    assert parse(text) == {
        "a": "SELECT x\nFROM t\nLIMIT $2",
        "b": "WITH c AS (\n  SELECT x\n  FROM t\n      WHERE y\n  LIMIT $3\n)\nTABLE c",
    }


@pytest.mark.parametrize(
    ("use", "match"),
    [
        ("@nothing(limit=$2)", "does not define"),
        ("@pick(limit=$2)", "takes"),
        ("@pick(limit=$2, only_if=, extra=1)", "takes"),
        ("@pick(limit=$2,only_if=)", "cannot read"),
    ],
)
def test_a_fragment_used_wrongly_is_refused_when_the_file_is_read(use: str, match: str) -> None:
    text = f"-- fragment: pick --\nSELECT x\n{{only_if}}\nLIMIT {{limit}}\n\n-- a --\n{use}\n"
    with pytest.raises(RuntimeError, match=match):
        parse(text)


def test_a_package_s_file_is_read_from_its_sql_folder() -> None:
    pytest.importorskip("workhive_postgres", reason="reads a file the PostgreSQL plugin ships")
    statements = read("workhive_postgres", "queries.sql")
    # Fragments are filled in (no "@name(" use is left); "@hive." is the PostgreSQL plugin's own placeholder.
    assert "claim" in statements and not re.search(r"@\w+\(", statements["claim"])
