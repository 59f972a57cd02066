"""tests/broken needs its fixture plugin (tests/fixtures/broken-plugin) installed, as the `broken` tox env does.

Without it, a run that merely passes by (a bare ``pytest`` at the repository
root) skips these tests and says why; a run that asks for them by path
(``pytest tests/broken``, the tox env's command) stops with what to install,
so they can never pass by being skipped where they are meant to run.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

FIXTURE_DISTRIBUTION = "workhive-broken-example"
HERE = Path(__file__).resolve().parent
INSTALL = "pip install -e tests/fixtures/broken-plugin (or run `tox -e broken`)"


def fixture_plugin_installed() -> bool:
    try:
        importlib.metadata.distribution(FIXTURE_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def asked_for_by_path(config: pytest.Config) -> bool:
    """Whether the command line names this directory or something inside it."""
    for arg in config.args:
        path = Path(config.invocation_params.dir, arg.split("::")[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if fixture_plugin_installed():
        return
    ours = [item for item in items if HERE in Path(item.path).resolve().parents]
    if not ours:
        return
    if asked_for_by_path(config):
        raise pytest.UsageError(
            f"tests/broken needs the fixture plugin {FIXTURE_DISTRIBUTION!r}, which is not installed: {INSTALL}"
        )
    skip = pytest.mark.skip(reason=f"needs the fixture plugin {FIXTURE_DISTRIBUTION!r}: {INSTALL}")
    for item in ours:
        item.add_marker(skip)
