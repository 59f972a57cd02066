"""The core's extras name the repository's plugins as the README says: ``all`` every one of plugins/."""

from __future__ import annotations

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import PROJECTS


def _names(extra: str) -> set[str]:
    return {canonicalize_name(Requirement(text).name) for text in PROJECTS["."].extras[extra]}


def test_all_names_every_plugin_in_plugins() -> None:
    plugins = {p.name for path, p in PROJECTS.items() if path.startswith("plugins/")}
    assert {"workhive-sqlite", "workhive-postgres", "workhive-redis"} <= plugins  # the layout is as expected
    assert plugins - _names("all") == set(), "workhive[all] leaves out plugins"


def test_each_engine_has_an_extra_of_its_own() -> None:
    assert _names("postgres") == {"workhive-postgres"}
    assert _names("redis") == {"workhive-redis"}


def test_every_workhive_distribution_an_extra_names_is_in_the_repository() -> None:
    ours = {p.name for p in PROJECTS.values()}
    for project in PROJECTS.values():
        for extra in project.extras:
            strangers = {n for n in _names_of(project.extras[extra]) if n.startswith("workhive") and n not in ours}
            assert not strangers, f"{project.name}[{extra}] names {strangers}, which this repository does not have"


def _names_of(texts: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(text).name) for text in texts}
