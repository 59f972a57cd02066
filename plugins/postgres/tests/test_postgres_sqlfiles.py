"""``sqlfiles.py``: statements read from ``sql/``, the claim written once and shared by both claim statements.

These read the package's files; they need no server (the plan tests in
``test_postgres_backend.py`` check what PostgreSQL makes of the statements).
"""

from __future__ import annotations

import re
from importlib import resources

import pytest

from workhive_postgres.sqlfiles import _split, queries, with_limit

QUERIES = (resources.files("workhive_postgres") / "sql" / "queries.sql").read_text("utf-8")


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def test_the_claim_is_written_once_in_the_sql_files() -> None:
    """Both claim statements once repeated the same 13-line UPDATE by hand; one fragment holds it now."""
    assert QUERIES.count("THEN 'claimed' ELSE 'poisoned' END") == 1
    assert QUERIES.count("stopped heartbeating or crashed") == 1
    q = queries()
    for name in ("claim", "complete_and_claim"):
        assert "FOR UPDATE SKIP LOCKED" in q[name] and "@" not in q[name], name
    assert not any(name.startswith("fragment") or name == "claim_items" for name in q)


def test_both_claim_statements_claim_alike_with_their_own_parameters() -> None:
    """complete_and_claim's claim is claim's, with $6-$8 for $3-$5 and one more condition (done first)."""
    q = queries()
    claim = _flat(q["claim"])
    fused = _flat(q["complete_and_claim"])
    inner = fused[fused.index("claimed AS ( ") + len("claimed AS ( ") : fused.index(" ) SELECT EXISTS")]
    renumbered = claim.replace("$3", "$6").replace("$4", "$7").replace("$5", "$8")
    condition = " AND EXISTS (SELECT FROM done)"
    at = renumbered.index(" ORDER BY priority DESC")
    assert inner == renumbered[:at] + condition + renumbered[at:]
    # The limit is the last parameter of each, as with_limit requires.
    assert "LIMIT 7 " in with_limit(q["claim"], 7) and "LIMIT 7 " in with_limit(q["complete_and_claim"], 7)


def test_a_fragment_fills_in_its_values_with_the_indentation_of_its_use() -> None:
    text = (
        "-- fragment: pick --\nSELECT x\nFROM t\n    {only_if}\nLIMIT {limit}\n\n"
        "-- a --\n@pick(limit=$2, only_if=)\n\n-- b --\nWITH c AS (\n  @pick(limit=$3, only_if=WHERE y)\n)\nTABLE c;\n"
    )
    assert _split(text) == {
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
        _split(text)
