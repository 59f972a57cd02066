"""Every ``pip install`` command in the repository's Markdown works, from the root of a checkout, as written.

Each distinct command runs once, in a fresh virtualenv, from a fresh copy of
the checkout (``conftest.py``). It must succeed and leave installed every
distribution it names or its extras name; each workhive distribution among
them must come from the checkout (``-e`` ones editable) and every workhive
plugin it carries must load (``workhive plugins`` lists it active). Commands
marked ``# once published`` wait for an index and are skipped, each only if
a command beside it installs the same from the checkout today.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from readme_commands import InstallCommand, check_once_published, expected_distributions

from conftest import PROJECTS, Installed, Jobs, discovered

COMMANDS, PROBLEM = discovered()
RUNNABLE: dict[tuple[str, ...], list[InstallCommand]] = {}
for _command in COMMANDS:
    if not _command.once_published:
        RUNNABLE.setdefault(tuple(_command.argv), []).append(_command)
WAITING = [c for c in COMMANDS if c.once_published]


def test_every_pip_install_line_of_the_markdown_is_readable() -> None:
    assert PROBLEM is None, PROBLEM
    assert RUNNABLE, "no pip install command found in any Markdown file: the parser is broken"


@pytest.mark.parametrize("command", WAITING, ids=[c.where for c in WAITING])
def test_a_command_waiting_for_an_index_has_a_checkout_command_beside_it(command: InstallCommand) -> None:
    check_once_published(command, COMMANDS, PROJECTS)


def _same(where: list[InstallCommand]) -> str:
    return ", ".join(c.where for c in where)


@pytest.mark.parametrize(
    "command", [group[0] for group in RUNNABLE.values()], ids=[_same(group) for group in RUNNABLE.values()]
)
def test_the_command_installs_what_it_names_from_the_checkout(command: InstallCommand, jobs: Jobs) -> None:
    done: Installed = jobs.installs[tuple(command.argv)].result()
    shown = f"`{command.text}` ({_same(RUNNABLE[tuple(command.argv)])})"
    if done.pip.returncode != 0:
        pytest.fail(f"{shown} failed:\n{done.pip.stdout[-3000:]}\n{done.pip.stderr[-3000:]}", pytrace=False)

    expected = expected_distributions(command, PROJECTS)
    missing = sorted(name for name in expected if not done.report.get(name))
    assert not missing, f"{shown} left out {', '.join(missing)}"

    editable = {t.path for t in command.targets if t.local and t.editable}
    ours = {p.name: p for p in PROJECTS.values()}
    for name, info in done.report.items():
        if info is None or name not in ours:
            continue
        project = ours[name]
        direct = info["direct_url"]
        # From the checkout, not from an index: pip records the directory it installed.
        assert direct is not None, f"{shown} installed {name} from an index, not from {project.path}/"
        source = Path(direct["url"].removeprefix("file://")).resolve()
        assert source == (done.checkout / project.path).resolve(), f"{shown} took {name} from {source}"
        assert bool(direct.get("dir_info", {}).get("editable")) == (project.path in editable), (
            f"{shown}: {name} should {'' if project.path in editable else 'not '}be an editable install"
        )

    if done.plugins is None:
        pytest.fail(f"{shown} did not install workhive, so `workhive plugins` cannot run", pytrace=False)
    if done.plugins.returncode != 0:
        pytest.fail(f"`workhive plugins --json` after {shown} failed: {done.plugins.stderr}", pytrace=False)
    listed = {p["name"]: p for p in json.loads(done.plugins.stdout)}
    for name, info in done.report.items():
        if info is None or name not in ours:
            continue
        for plugin in info["entry_points"]:
            assert plugin in listed, f"after {shown}, `workhive plugins` does not list {plugin} ({name})"
            assert listed[plugin]["status"] == "active", f"after {shown}, plugin {plugin}: {listed[plugin]}"
