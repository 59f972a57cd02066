"""The Markdown reader of tests/installs: what counts as a command, and what it is expected to install."""

from __future__ import annotations

import textwrap

import pytest
from readme_commands import CommandError, check_once_published, commands_in, expected_distributions

from conftest import PROJECTS


def read(markdown: str, name: str = "plugins/x/README.md") -> list[tuple[int, list[str], bool]]:
    return [(c.line, c.argv, c.once_published) for c in commands_in(textwrap.dedent(markdown), name)]


def test_commands_in_code_blocks_in_every_spelling_of_pip() -> None:
    found = read(
        """\
        # title

        ```sh
        pip install '.[postgres]' ./plugins/postgres   # today
        $ pip3 install -U ./plugins/redis
        .venv/bin/pip install -e '.[all,testing]' -e plugins/sqlite \\
            -e plugins/memory
        python3 -m pip install -q ./plugins/dashboard/
        workhive plugins
        ```

        ~~~
        pip install 'workhive[redis]'   # once published
        ~~~
        """
    )
    assert found == [
        (4, [".[postgres]", "./plugins/postgres"], False),
        (5, ["-U", "./plugins/redis"], False),
        (6, ["-e", ".[all,testing]", "-e", "plugins/sqlite", "-e", "plugins/memory"], False),
        (8, ["-q", "./plugins/dashboard/"], False),
        (13, ["workhive[redis]"], True),
    ]


def test_inline_commands_count_and_prose_about_an_option_does_not() -> None:
    found = read("Run `pip install . ./plugins/memory` first; `pip install -e` makes it editable.\n")
    assert found == [(1, [".", "./plugins/memory"], False)]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("cd plugins/postgres && pip install .", "at the start of a line"),
        ("pip install . && workhive plugins", "more than one pip command"),
        ("pip install -r requirements.txt", "not one this test knows"),
        ("pip install -e", "names nothing"),
        ("pip install -e workhive-postgres", "not a directory"),
        ("pip install 'unclosed", "does not split"),
        ("# then: pip install workhive", "at the start of a line"),
    ],
)
def test_a_pip_install_line_that_cannot_be_read_is_an_error_not_skipped(line: str, why: str) -> None:
    with pytest.raises(CommandError, match=why):
        read(f"```\n{line}\n```\n")


def test_an_unclosed_code_block_is_an_error() -> None:
    with pytest.raises(CommandError, match="never closed"):
        read("```sh\npip install .\n")


def test_expected_distributions_follow_the_extras_through_the_repository() -> None:
    [command] = commands_in("```\npip install '.[demo]' ./plugins/sqlite\n```\n", "README.md")
    expected = expected_distributions(command, PROJECTS)
    assert expected["workhive"] == "." and expected["workhive-sqlite"] == "plugins/sqlite"
    # named by the demo extra only: still expected, from wherever pip finds them
    assert {"httpx", "workhive-env-credentials", "workhive-fcntl-locks"} <= set(expected)
    [example] = commands_in("```\npip install -e . -e 'examples/thirdparty-plugin[testing]'\n```\n", "README.md")
    assert {"workhive-listbackend", "pytest", "hypothesis"} <= set(expected_distributions(example, PROJECTS))


def test_an_unknown_extra_or_directory_is_an_error() -> None:
    [command] = commands_in("```\npip install '.[nosuch]'\n```\n", "README.md")
    with pytest.raises(CommandError, match="no extra 'nosuch'"):
        expected_distributions(command, PROJECTS)
    [command] = commands_in("```\npip install ./plugins/nosuch\n```\n", "README.md")
    with pytest.raises(CommandError, match="not a distribution of this repository"):
        expected_distributions(command, PROJECTS)


def test_a_command_waiting_for_an_index_needs_a_checkout_twin_and_only_our_names() -> None:
    twin = "pip install '.[postgres]' ./plugins/postgres\n"
    waiting = "pip install 'workhive[postgres]'   # once published\n"
    commands = commands_in(f"```\n{twin}{waiting}```\n", "plugins/postgres/README.md")
    check_once_published(commands[1], commands, PROJECTS)

    alone = commands_in(f"```\n{waiting}```\n", "plugins/postgres/README.md")
    with pytest.raises(CommandError, match="no command beside it"):
        check_once_published(alone[0], alone, PROJECTS)

    # a twin in another file does not count: each README must say it
    elsewhere = commands_in(f"```\n{twin}```\n", "README.md") + alone
    with pytest.raises(CommandError, match="no command beside it"):
        check_once_published(alone[0], elsewhere, PROJECTS)

    stranger = commands_in("```\npip install requests   # once published\n```\n", "README.md")
    with pytest.raises(CommandError, match="not a distribution of this repository"):
        check_once_published(stranger[0], stranger, PROJECTS)
