"""The Lua scripts, one file per operation under ``lua/``, loaded once and called by SHA.

Each file is named after its operation and the number of keys it takes
(``claim-3.lua``) and opens with a comment block listing its KEYS, ARGV and
return values. Shared pieces live in ``lua/includes/`` and are pulled in by
a line ``--- @include "name"``, so the text sent to the server is one
self-contained script. Scripts are registered with ``SCRIPT LOAD`` when a
backend opens, then called with ``EVALSHA``; after a server restart or a
``SCRIPT FLUSH`` the server answers ``NOSCRIPT`` and the caller loads them
again (``workhive_redis.connections``).
"""

from __future__ import annotations

import functools
import hashlib
import re
from importlib import resources

import attrs

__all__ = ["Script", "load_scripts"]

_INCLUDE = re.compile(r'^--- @include "([a-z_]+)"$', re.MULTILINE)
_NAME = re.compile(r"([a-z_]+)-(\d+)\.lua")


@attrs.frozen
class Script:
    """One operation's script: its name, how many KEYS it takes, its text and SHA-1."""

    name: str
    keys: int
    text: str = attrs.field(repr=False)
    sha: str


def _include(name: str, seen: tuple[str, ...]) -> str:
    if name in seen:
        raise RuntimeError(f"Lua include cycle: {' -> '.join((*seen, name))}")
    text = (
        resources.files("workhive_redis")
        .joinpath("lua")
        .joinpath("includes")
        .joinpath(f"{name}.lua")
        .read_text("utf-8")
    )
    return _INCLUDE.sub(lambda m: _include(m.group(1), (*seen, name)), text)


@functools.lru_cache(maxsize=1)
def load_scripts() -> dict[str, Script]:
    """Every script of the package by operation name, includes resolved (read once per process)."""
    scripts: dict[str, Script] = {}
    for entry in resources.files("workhive_redis").joinpath("lua").iterdir():
        match = _NAME.fullmatch(entry.name)
        if match is None:
            continue
        text = _INCLUDE.sub(lambda m: _include(m.group(1), ()), entry.read_text("utf-8"))
        sha = hashlib.sha1(text.encode("utf-8")).hexdigest()
        scripts[match.group(1)] = Script(match.group(1), int(match.group(2)), text, sha)
    return scripts
