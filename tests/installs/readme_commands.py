"""The ``pip install`` commands the repository's Markdown tells people to run, and what each should install.

Every fenced code block of every Markdown file is read, and every inline code
span that is a whole ``pip install`` command. A command runs from the root of
a checkout (the READMEs say so); ``pip``, ``pip3``, ``.venv/bin/pip`` and
``python -m pip`` all mean the pip of the environment being installed into.

A command that names distributions which exist only once they are published
on an index carries the comment ``# once published`` on its line: it is not
run, but it may name only this repository's distributions, and the same file
must hold a command that runs and installs at least as much from the checkout.

A line that mentions ``pip install`` in a form this module cannot read (a
shell pipeline, ``cd x && pip install``, an option it does not know) is an
error, not something to skip: add the form here, with what it means.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ONCE_PUBLISHED = "once published"
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_PIP = re.compile(r"^(?:\S*/)?(?:pip3?|python3?(?:\.\d+)? -m pip)\s+install(?=\s|$)")
_MENTION = re.compile(r"\bpip3?\s+install\b|-m pip install\b")
#: options a command may carry; each takes no value except --editable
_FLAGS = {"-U", "--upgrade", "-q", "--quiet", "-v", "--verbose"}
_EDITABLE = {"-e", "--editable"}
_LOCAL = re.compile(r"^(?P<path>(?:\.{1,2}|/|[\w.-]+/)[^\[]*)(?:\[(?P<extras>[^\]]*)\])?$")


class CommandError(ValueError):
    """A ``pip install`` line this module cannot read; the message says where and why."""


@dataclass(frozen=True)
class Target:
    """One thing a command installs: a directory of the checkout, or a requirement from an index."""

    spec: str  # as written
    path: str | None = None  # the directory, relative to the checkout root (local targets)
    name: str | None = None  # the distribution (index targets)
    extras: tuple[str, ...] = ()
    editable: bool = False

    @property
    def local(self) -> bool:
        return self.path is not None


@dataclass(frozen=True)
class InstallCommand:
    """One ``pip install`` command found in a Markdown file."""

    file: str  # relative to the checkout root
    line: int  # 1-based line of the command's first line
    text: str  # the command as written, continuation lines joined
    targets: tuple[Target, ...]
    once_published: bool = False
    flags: tuple[str, ...] = field(default=())

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def argv(self) -> list[str]:
        """The pip arguments after ``install``, as the shell would pass them."""
        args: list[str] = list(self.flags)
        for target in self.targets:
            args += ["-e", target.spec] if target.editable else [target.spec]
        return args


def _split_comment(text: str) -> tuple[str, str]:
    """``(command, comment)``: the comment starts at the first ``#`` outside quotes after a blank."""
    quote = ""
    for i, char in enumerate(text):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip(), text[i + 1 :].strip()
    return text.rstrip(), ""


def _target(spec: str, editable: bool, where: str) -> Target:
    local = _LOCAL.match(spec)
    if local:
        extras = tuple(e.strip() for e in (local.group("extras") or "").split(",") if e.strip())
        return Target(spec=spec, path=posixpath.normpath(local.group("path")), extras=extras, editable=editable)
    if editable:
        raise CommandError(f"{where}: -e {spec!r} is not a directory of the checkout")
    try:
        req = Requirement(spec)
    except InvalidRequirement as exc:
        raise CommandError(f"{where}: {spec!r} is neither a directory nor a requirement ({exc})") from None
    return Target(spec=spec, name=canonicalize_name(req.name), extras=tuple(sorted(req.extras)))


def parse_command(text: str, file: str, line: int) -> InstallCommand:
    """Read one command line (continuations already joined); ``CommandError`` for a form not understood."""
    where = f"{file}:{line}"
    body, comment = _split_comment(text.strip().removeprefix("$ ").strip())
    match = _PIP.match(body)
    if match is None:
        raise CommandError(f"{where}: cannot read {text.strip()!r}: write `pip install ...` at the start of a line")
    try:
        words = shlex.split(body[match.end() :])
    except ValueError as exc:
        raise CommandError(f"{where}: {text.strip()!r} does not split into words ({exc})") from None
    if any(w in ("|", "||", "&&", ";", ">", "<") or w.endswith(";") for w in words):
        raise CommandError(f"{where}: {text.strip()!r} is more than one pip command; put each on a line of its own")
    flags: list[str] = []
    targets: list[Target] = []
    editable = False
    for word in words:
        if editable:
            targets.append(_target(word, True, where))
            editable = False
        elif word in _EDITABLE:
            editable = True
        elif word in _FLAGS:
            flags.append(word)
        elif word.startswith("-"):
            raise CommandError(f"{where}: the option {word!r} of {text.strip()!r} is not one this test knows")
        else:
            targets.append(_target(word, False, where))
    if editable or not targets:
        raise CommandError(f"{where}: {text.strip()!r} names nothing to install")
    return InstallCommand(
        file=file,
        line=line,
        text=text.strip(),
        targets=tuple(targets),
        once_published=ONCE_PUBLISHED in comment.lower(),
        flags=tuple(flags),
    )


def _logical_lines(lines: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Join shell continuation lines (a trailing backslash) into one, numbered by the first."""
    start, parts = 0, list[str]()
    for number, line in lines:
        if not parts:
            start = number
        if line.rstrip().endswith("\\"):
            parts.append(line.rstrip()[:-1])
            continue
        parts.append(line)
        yield start, " ".join(p.strip() for p in parts)
        parts = []
    if parts:
        yield start, " ".join(p.strip() for p in parts)


def commands_in(markdown: str, file: str) -> list[InstallCommand]:
    """Every ``pip install`` command of one Markdown document, in order."""
    found: list[InstallCommand] = []
    block: list[tuple[int, str]] | None = None
    fence = ""
    for number, line in enumerate(markdown.splitlines(), start=1):
        opening = _FENCE.match(line)
        if block is None:
            if opening:
                block, fence = [], opening.group(1)
                continue
            for span in _INLINE.findall(line):
                command = span.strip()
                pip = _PIP.match(command)
                # "installed with `pip install -e`" is prose about an option, not a command to run.
                if pip and any(not w.startswith("-") for w in command[pip.end() :].split()):
                    found.append(parse_command(command, file, number))
            continue
        if opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence):
            for start, logical in _logical_lines(block):
                if _MENTION.search(logical):
                    found.append(parse_command(logical, file, start))
            block = None
            continue
        block.append((number, line))
    if block is not None:
        raise CommandError(f"{file}: a code block opened with {fence} is never closed")
    return found


def markdown_files(root: Path, files: Iterable[str]) -> list[str]:
    """The Markdown files among ``files`` (paths relative to ``root``), sorted."""
    return sorted(f for f in files if f.endswith(".md") and (root / f).is_file())


def all_commands(root: Path, files: Iterable[str]) -> list[InstallCommand]:
    """Every command of every Markdown file among ``files``."""
    commands: list[InstallCommand] = []
    for name in markdown_files(root, files):
        commands += commands_in((root / name).read_text(encoding="utf-8"), name)
    return commands


@dataclass(frozen=True)
class Project:
    """One distribution of the repository, read from its pyproject.toml."""

    path: str  # its directory, relative to the checkout root ("." for the core)
    name: str  # canonical
    version: str
    data: Mapping[str, object]

    @property
    def extras(self) -> Mapping[str, list[str]]:
        project = self.data["project"]
        assert isinstance(project, dict)
        return project.get("optional-dependencies", {})  # type: ignore[no-any-return]


def read_project(root: Path, path: str) -> Project:
    data = tomllib.loads((root / path / "pyproject.toml").read_text(encoding="utf-8"))
    project = data["project"]
    return Project(path=path, name=canonicalize_name(project["name"]), version=project["version"], data=data)


def projects(root: Path, files: Iterable[str]) -> dict[str, Project]:
    """Every distribution of the checkout by directory: the core, plugins/*, integrations/*, examples/*."""
    found: dict[str, Project] = {}
    for name in sorted(files):
        parts = name.split("/")
        if parts[-1] != "pyproject.toml":
            continue
        directory = "/".join(parts[:-1]) or "."
        if directory == "." or (len(parts) == 3 and parts[0] in ("plugins", "integrations", "examples")):
            found[directory] = read_project(root, directory)
    return found


def _requirements(project: Project, extras: Iterable[str], where: str) -> Iterator[Requirement]:
    for extra in extras:
        if extra not in project.extras:
            raise CommandError(f"{where}: {project.name} has no extra {extra!r} (it has {', '.join(project.extras)})")
        for text in project.extras[extra]:
            req = Requirement(text)
            # A marker is judged for the Python running the tests (the one the virtualenvs get).
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                yield req


def expected_distributions(command: InstallCommand, by_path: Mapping[str, Project]) -> dict[str, str | None]:
    """What the command must leave installed: canonical name -> the checkout directory it comes from (or None).

    The targets, and every requirement their extras name (followed through this
    repository's own distributions, so ``.[all]`` means every plugin ``all`` lists).
    """
    by_name = {p.name: p for p in by_path.values()}
    expected: dict[str, str | None] = {}
    pending: list[tuple[str, tuple[str, ...]]] = []
    for target in command.targets:
        if target.local:
            project = by_path.get(target.path or "")
            if project is None:
                raise CommandError(f"{command.where}: {target.spec!r} is not a distribution of this repository")
            expected[project.name] = project.path
            pending.append((project.name, target.extras))
        else:
            assert target.name is not None
            expected.setdefault(target.name, None)
            pending.append((target.name, target.extras))
    seen: set[tuple[str, str]] = set()
    while pending:
        name, extras = pending.pop()
        project = by_name.get(name)
        if project is None:
            continue  # a third-party distribution: its extras are its own business
        for extra in extras:
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            for req in _requirements(project, [extra], command.where):
                dist = canonicalize_name(req.name)
                expected.setdefault(dist, None)
                pending.append((dist, tuple(sorted(req.extras))))
    return expected


def check_once_published(
    command: InstallCommand, siblings: Iterable[InstallCommand], by_path: Mapping[str, Project]
) -> None:
    """``CommandError`` unless a ``# once published`` command names only this repository's distributions
    and its file holds a runnable command that installs at least as much from the checkout."""
    ours = {p.name for p in by_path.values()}
    strangers = [t.spec for t in command.targets if t.local or t.name not in ours]
    if strangers:
        raise CommandError(
            f"{command.where}: {command.text!r} is marked '# {ONCE_PUBLISHED}' but names {', '.join(strangers)}, "
            "which is not a distribution of this repository: only those may wait for an index"
        )
    wanted = set(expected_distributions(command, by_path))
    for other in siblings:
        if other.once_published or other.file != command.file:
            continue
        if wanted <= set(expected_distributions(other, by_path)):
            return
    raise CommandError(
        f"{command.where}: {command.text!r} waits for an index, and {command.file} has no command beside it "
        f"that installs {', '.join(sorted(wanted))} from the checkout today"
    )
