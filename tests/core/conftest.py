"""Helpers for core tests: these run with the core alone, no plugins installed."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def fake_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """Make a distribution with ``workhive`` entry points importable from ``tmp_path``.

    ``make(dist_name, version, {ep_name: module_source})`` writes a dist-info
    directory and the modules, and puts them on sys.path, which is exactly
    what ``importlib.metadata`` reads for an installed plugin.
    """
    monkeypatch.syspath_prepend(str(tmp_path))
    created: list[str] = []

    def make(dist: str, version: str, modules: dict[str, str]) -> None:
        info = tmp_path / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        lines = ["[workhive]"]
        for ep_name, source in modules.items():
            module = f"{dist.replace('-', '_')}_{ep_name.replace('-', '_')}"
            (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
            lines.append(f"{ep_name} = {module}")
            created.append(module)
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")

    yield make
    for module in created:
        sys.modules.pop(module, None)
