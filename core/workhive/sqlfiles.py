"""Named SQL statements read from a ``.sql`` file: the reader every SQL engine's ``sqlfiles.py`` uses.

A file holds one statement per ``-- name --`` header (the procrastinate layout:
a reader sees every statement in one place). A ``-- fragment: name --`` header
holds text that statements share: a line ``@name(key=value, ...)`` in a
statement stands for it, indented like that line, each ``{key}`` in it replaced
by its value, and a line that is only ``{key}`` dropped when the value is empty.
Lines starting with ``--`` are comments and dropped. Engine-specific handling
(placeholder styles, limits written into the text) stays in the engine's plugin.

>>> parse("-- fragment: cols --\\nid, name\\n\\n-- one --\\nSELECT\\n    @cols()\\nFROM t WHERE id = $1;\\n")
{'one': 'SELECT\\n    id, name\\nFROM t WHERE id = $1'}
"""

from __future__ import annotations

import functools
import re
from importlib.resources import files

__all__ = ["parse", "read"]

_HEADER = re.compile(r"^-- ((?:fragment: )?[a-z_]+) --$", re.MULTILINE)
_USE = re.compile(r"^( *)@([a-z_]+)\((.*)\)$", re.MULTILINE)
_ARGUMENT = re.compile(r"([a-z_]+)=([^,]*)(?:, |$)")
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
_FRAGMENT = "fragment: "


def read(package: str, name: str) -> dict[str, str]:
    """The statements of ``sql/<name>`` shipped in ``package``, by name (see ``parse``)."""
    return parse((files(package) / "sql" / name).read_text(encoding="utf-8"))


def parse(text: str) -> dict[str, str]:
    """Statement text by name: comments dropped, fragments expanded, no trailing semicolon.

    Raises ``RuntimeError`` for a fragment used wrongly: the file ships with the
    package, so that is a bug in the package, found when the file is first read.
    """
    parts = _HEADER.split(text)
    found: dict[str, str] = {}
    fragments: dict[str, str] = {}
    # parts: [preamble, name, body, name, body, ...]
    for name, body in zip(parts[1::2], parts[2::2]):
        lines = [line for line in body.strip().splitlines() if not line.startswith("--")]
        if name.startswith(_FRAGMENT):
            fragments[name.removeprefix(_FRAGMENT)] = "\n".join(lines).strip()
        else:
            found[name] = "\n".join(lines).strip().rstrip(";")
    for name, body in found.items():
        found[name] = _USE.sub(functools.partial(_expand, fragments=fragments, statement=name), body)
    return found


def _expand(use: re.Match[str], fragments: dict[str, str], statement: str) -> str:
    """The text of one ``@fragment(key=value, ...)`` line: the fragment, indented like the line, filled in."""
    indent, name, given = use.group(1), use.group(2), use.group(3)
    if name not in fragments:
        raise RuntimeError(f"statement {statement!r} uses fragment {name!r}, which the SQL file does not define")
    values = dict(_ARGUMENT.findall(given))
    if ", ".join(f"{k}={v}" for k, v in values.items()) != given:
        raise RuntimeError(f"statement {statement!r}: cannot read the arguments of @{name}({given})")
    wanted = set(_PLACEHOLDER.findall(fragments[name]))
    if set(values) != wanted:
        raise RuntimeError(f"statement {statement!r}: @{name} takes {sorted(wanted)}, given {sorted(values)}")
    lines = []
    for line in fragments[name].splitlines():
        if _PLACEHOLDER.fullmatch(line.strip()) and not values[line.strip()[1:-1]]:
            continue  # a condition left empty: the line goes, so the text is what it was by hand
        lines.append(indent + _PLACEHOLDER.sub(lambda m: values[m.group(1)], line) if line else line)
    return "\n".join(lines)
