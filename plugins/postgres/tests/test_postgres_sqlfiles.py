"""``sqlfiles.py``: statements read from ``sql/``, the claim written once and shared by both claim statements.

These read the package's files; they need no server (the plan tests in
``test_postgres_backend.py`` check what PostgreSQL makes of the statements).
How fragments are read is tested with the reader, in ``tests/core/test_sqlfiles.py``.
"""

from __future__ import annotations

import re
from importlib import resources

from workhive_postgres.sqlfiles import HIVE, queries, statements, with_limit

QUERIES = (resources.files("workhive_postgres") / "sql" / "queries.sql").read_text("utf-8")


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def test_the_claim_is_written_once_in_the_sql_files() -> None:
    """Both claim statements once repeated the same 13-line UPDATE by hand; one fragment holds it now."""
    assert QUERIES.count("THEN 'claimed' ELSE 'poisoned' END") == 1
    assert QUERIES.count("stopped heartbeating or crashed") == 1
    q = queries()
    for name in ("claim", "complete_and_claim"):
        assert "FOR UPDATE SKIP LOCKED" in q[name] and "@claim_items" not in q[name], name
    assert not any(name.startswith("fragment") or name == "claim_items" for name in q)


def test_both_claim_statements_claim_alike_with_their_own_parameters() -> None:
    """complete_and_claim's claim is claim's, with $6-$8 for $3-$5 and one more condition (done first)."""
    q = queries()
    claim = _flat(q["claim"])
    fused = _flat(q["complete_and_claim"])
    inner = fused[fused.index("claimed AS ( ") + len("claimed AS ( ") : fused.index(" ) SELECT EXISTS")]
    renumbered = claim.replace("$3", "$6").replace("$4", "$7").replace("$5", "$8")
    condition = " AND EXISTS (SELECT FROM done)"
    at = renumbered.index(" ORDER BY band.priority DESC")  # the bands' own order: the condition is on them
    assert inner == renumbered[:at] + condition + renumbered[at:]
    # The limit is the last parameter of each, as with_limit requires: each band's and the whole claim's.
    for name in ("claim", "complete_and_claim"):
        limited = with_limit(q[name], 7)
        assert len(re.findall(r"LIMIT 7\b", limited)) == 2 and "LIMIT $" not in limited, name


# A relation after FROM/JOIN/INTO/UPDATE (a LATERAL subquery names none).
_RELATION = re.compile(r"\b(?:FROM|JOIN|INTO|UPDATE)\s+(?!LATERAL\b)([\w\".@]+)(\(?)")


def _no_row_words(text: str) -> str:
    """``text`` without the clauses where UPDATE or FROM names no table (a row lock, an upsert, extract)."""
    return text.replace("FOR UPDATE", "").replace("DO UPDATE SET", "").replace("extract(epoch FROM", "extract(")


def test_every_statement_names_the_hive_schema_itself_never_through_search_path() -> None:
    """Behind PgBouncer's transaction pooling a connection keeps no search_path: every object of the
    hive is written schema-qualified (``@hive.name`` in the files, ``"schema".name`` once opened)."""
    for file in ("queries.sql", "locks.sql"):
        for name, text in statements("wh_q", file).items():
            assert HIVE not in text, (file, name)
            ctes = set(re.findall(r"(\w+) AS \(", text))
            for relation, call in _RELATION.findall(_no_row_words(text)):
                if call or relation in ctes or relation.startswith("pg_"):
                    continue  # a set-returning function (unnest, generate_series), a CTE, the catalog
                assert relation.startswith('"wh_q".'), f"{file} {name}: {relation} is not schema-qualified"
            # The hive's function and sequence too (nextval resolves its text argument by search_path).
            assert not re.search(r"(?<![\w.])now_s\(", text), f"{file} {name}: now_s( without its schema"
            assert not re.search(r"nextval\('(?!\"wh_q\"\.)", text), f"{file} {name}: an unqualified sequence"
    # Filled in once per schema; another schema gets its own text.
    assert statements("wh_q")["now"] == 'SELECT "wh_q".now_s($1)'
    assert statements("other")["now"] == 'SELECT "other".now_s($1)'
    assert queries()["now"] == "SELECT @hive.now_s($1)"
