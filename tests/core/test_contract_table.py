"""The storage contract's rule table and its test suite say the same thing.

The table in ``workhive/storage.py`` is the spec a backend author works down;
``workhive.testing.storage`` is its definition. These tests keep the two in
step: the table names only tests that exist, every test starts its docstring
with the ids of the rules it checks, every id cited anywhere in the suite is a
rule of the table, the table lists each test under exactly the rules it cites,
and each family's tests live in the file the table names for it.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

import workhive.storage
import workhive.testing.stateful
import workhive.testing.storage
from workhive.testing.stateful import StorageStatefulContract
from workhive.testing.storage import StorageContract

SUITE_DIR = Path(workhive.testing.storage.__file__).parent
STATEFUL_FILE = Path(workhive.testing.stateful.__file__)
MODEL_TEST = "test_storage_matches_the_model"
# A rule id in brackets, as tests cite them: [C1], [W5][W6].
CITATION = re.compile(r"\[([A-Z]{1,2}[0-9]+)\]")  # F1, ST3
LEADING_IDS = re.compile(r"(?:\[[A-Z]{1,2}[0-9]+\])+")
TEST_NAME = re.compile(r"[a-z0-9_]+")


@attrs.define
class Rule:
    """One row of the table: its id, the family file it sits under, and what its "checked by" column names."""

    id: str
    file: str | None
    tests: list[str] = attrs.field(factory=list)
    model: bool = False
    #: entries that are neither a test name, ``[model]``, a (note) nor a ``reference``: a typo or a truncated name
    malformed: list[str] = attrs.field(factory=list)


def parse_table(doc: str) -> dict[str, Rule]:
    """The rule table of a module docstring, found by its ``====`` rulers and its column headings."""
    lines = doc.splitlines()
    rulers = [i for i, line in enumerate(lines) if re.fullmatch(r"=+(?: +=+)+", line)]
    assert len(rulers) >= 3, "no reStructuredText table (three ==== rulers) in workhive/storage.py's docstring"
    top, below_heading, bottom = rulers[:3]
    spans = [m.span() for m in re.finditer(r"=+", lines[top])]

    def cells(line: str) -> list[str]:
        # The last column runs to the end of the line (names may be longer than its ruler).
        return [line[a : (b if k < len(spans) - 1 else None)].strip() for k, (a, b) in enumerate(spans)]

    headings = cells(lines[top + 1])
    column = {name: headings.index(name) for name in ("id", "checked by") if name in headings}
    assert set(column) == {"id", "checked by"}, f"the table's headings {headings} lack 'id' or 'checked by'"
    file_column = headings.index("file") if "file" in headings else None
    rules: dict[str, Rule] = {}
    checked: dict[str, list[str]] = {}
    current: Rule | None = None
    family: str | None = None
    for line in lines[below_heading + 1 : bottom]:
        row = cells(line)
        if file_column is not None and row[file_column]:
            family = row[file_column]  # a family's file is given on its first row and holds for the rows below
        if row[column["id"]]:
            rule_id = row[column["id"]]
            assert rule_id not in rules, f"rule {rule_id} appears twice in the table"
            current = rules[rule_id] = Rule(rule_id, family)
            checked[rule_id] = []
        if current is not None and row[column["checked by"]]:
            checked[current.id].append(row[column["checked by"]])
    for rule_id, parts in checked.items():
        rule = rules[rule_id]
        for entry in (e.strip() for e in " ".join(parts).split(",")):
            if not entry:
                continue
            if entry == "[model]":
                rule.model = True
            elif (entry.startswith("(") and entry.endswith(")")) or (entry.startswith("``") and entry.endswith("``")):
                continue  # a note, or another suite that checks the rule
            elif TEST_NAME.fullmatch(entry):
                rule.tests.append(entry)
            else:
                rule.malformed.append(entry)
    return rules


def suite_tests() -> dict[str, Callable[..., Any]]:
    """Every ``test_*`` of ``StorageContract`` (through its mixins), by name without the prefix."""
    found: dict[str, Callable[..., Any]] = {}
    for klass in StorageContract.__mro__:
        for name, member in vars(klass).items():
            if name.startswith("test_") and callable(member):
                found.setdefault(name.removeprefix("test_"), member)
    return found


def cited(function: Callable[..., Any]) -> list[str]:
    """The rule ids a test's docstring starts with (empty when it starts with none)."""
    match = LEADING_IDS.match(inspect.getdoc(function) or "")
    return CITATION.findall(match.group(0)) if match else []


def suite_files() -> list[Path]:
    """The sources of the storage suite: the package's modules (or the old single module) and the model test."""
    files = sorted(SUITE_DIR.glob("*.py")) if SUITE_DIR.name == "storage" else []
    return [*files, Path(inspect.getsourcefile(StorageContract) or ""), STATEFUL_FILE]


TABLE = parse_table(workhive.storage.__doc__ or "")
TESTS = suite_tests()
MODEL = getattr(StorageStatefulContract, MODEL_TEST)


def test_the_table_and_the_suite_are_both_there() -> None:
    """The checks below compare two non-empty things: a parser that found nothing would pass them all."""
    assert len(TABLE) >= 40, sorted(TABLE)
    assert len(TESTS) >= 80, sorted(TESTS)
    assert sum(len(rule.tests) for rule in TABLE.values()) >= len(TESTS)


def test_the_table_names_only_tests_that_exist() -> None:
    problems = [
        f"{rule.id}: {name!r} is not a test of StorageContract"
        for rule in TABLE.values()
        for name in rule.tests
        if name not in TESTS
    ]
    problems += [
        f"{rule.id}: {entry!r} is not a test name (write the whole name, without test_)"
        for rule in TABLE.values()
        for entry in rule.malformed
    ]
    assert not problems, "\n".join(problems)


def test_every_test_starts_its_docstring_with_its_rule_ids() -> None:
    missing = [name for name, test in sorted(TESTS.items()) if not cited(test)]
    if not cited(MODEL):
        missing.append(f"StorageStatefulContract.{MODEL_TEST}")
    assert not missing, f"{len(missing)} tests cite no rule at the start of their docstring:\n" + "\n".join(missing)


def test_every_rule_cited_in_the_suite_is_in_the_table() -> None:
    problems = []
    for path in dict.fromkeys(suite_files()):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            problems += [
                f"{path.name}:{number}: [{rule_id}]" for rule_id in CITATION.findall(line) if rule_id not in TABLE
            ]
    assert not problems, "the suite cites rules the table does not have:\n" + "\n".join(problems)


def test_the_table_lists_each_test_under_exactly_the_rules_it_cites() -> None:
    listed: dict[str, set[str]] = {}
    for rule in TABLE.values():
        for name in rule.tests:
            listed.setdefault(name, set()).add(rule.id)
    problems = [
        f"{name}: docstring cites {sorted(cited(test))}, table lists it under {sorted(listed.get(name, set()))}"
        for name, test in sorted(TESTS.items())
        if set(cited(test)) != listed.get(name, set())
    ]
    model_rules = {rule.id for rule in TABLE.values() if rule.model}
    if set(cited(MODEL)) != model_rules:
        problems.append(f"{MODEL_TEST}: docstring cites {sorted(cited(MODEL))}, [model] rows are {sorted(model_rules)}")
    assert not problems, "\n".join(problems)


def test_each_family_file_exists_and_holds_the_tests_of_its_rules() -> None:
    unfiled = [rule.id for rule in TABLE.values() if rule.file is None]
    assert not unfiled, f"the table has no file column, or no file for {unfiled}"
    families = {rule.file for rule in TABLE.values() if rule.file is not None}
    problems = [
        f"the table names {name}, which is not a file" for name in sorted(families) if not (SUITE_DIR / name).is_file()
    ]
    modules = {path.name for path in SUITE_DIR.glob("*.py")} - {"__init__.py", "base.py"}
    problems += [f"{name} holds tests but is no family of the table" for name in sorted(modules - families)]
    for name, test in sorted(TESTS.items()):
        home = Path(inspect.getsourcefile(test) or "").name
        allowed = {TABLE[rule_id].file for rule_id in cited(test) if rule_id in TABLE}
        if home not in allowed:
            problems.append(f"{name} lives in {home}, not in the file of a rule it cites ({sorted(map(str, allowed))})")
    assert not problems, "\n".join(problems)
