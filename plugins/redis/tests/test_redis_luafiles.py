"""The Lua scripts stay readable: each header names its KEYS and ARGV, every hash field is in the legend.

These read the files of ``workhive_redis/lua`` and the Python modules that
read hashes; they need no server.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest
from workhive_redis.keys import GROUP_FIELDS, GROUP_POOL_FIELDS, ITEM_FIELDS, LOCK_FIELDS, VERSION_FIELDS, WORKER_FIELDS
from workhive_redis.luafiles import load_scripts

PACKAGE = Path(str(resources.files("workhive_redis")))
SCRIPTS = sorted((PACKAGE / "lua").glob("*.lua"))
INCLUDES = sorted((PACKAGE / "lua" / "includes").glob("*.lua"))
_NAME = re.compile(r"([a-z_]+)-(\d+)\.lua")
#: a header line naming one KEYS or ARGV entry: ``KEYS[2] delayed``, ``ARGV[4..] five per item: ...``
_ENTRY = re.compile(r"^\s*(KEYS|ARGV)\[(\d+)(\.\.)?\]\s+\S")
_HASH_COMMANDS = {"HSET", "HSETNX", "HGET", "HMGET", "HDEL", "HINCRBY"}
#: scripts whose non-item hashes are of one kind (a worker's record, a lock, the version record)
_WORKER_SCRIPTS = {"register", "heartbeat", "set_status", "reap"}


def _header(text: str) -> str:
    assert text.startswith("--[["), "a script opens with a --[[ ... ]] header"
    return text[: text.index("]]")]


def _calls(text: str) -> list[list[str]]:
    """Every ``redis.call(...)``'s arguments, split at top-level commas (calls may span lines)."""
    found = []
    for match in re.finditer(r"redis\.call\(", text):
        depth, start, args, i = 1, match.end(), [], match.end()
        while depth:
            ch = text[i]
            if ch in "({":
                depth += 1
            elif ch in ")}":
                depth -= 1
            elif ch == "," and depth == 1:
                args.append(text[start:i].strip())
                start = i + 1
            elif ch == "'":
                i = text.index("'", i + 1)
            i += 1
        args.append(text[start : i - 1].strip())
        found.append(args)
    return found


def _literal(arg: str) -> str | None:
    match = re.fullmatch(r"'([a-z]+)'", arg)
    return match.group(1) if match else None


def _fields(args: list[str]) -> list[str]:
    """The literal field names a hash command names (values of HSET are skipped)."""
    command, rest = args[0].strip("'"), args[2:]
    if command == "HSET":
        named = rest[0::2]
    elif command in ("HGET", "HINCRBY", "HSETNX"):
        named = rest[:1]
    else:
        named = rest
    return [name for name in (_literal(a) for a in named) if name is not None]


def test_the_scripts_are_the_files_of_lua() -> None:
    assert SCRIPTS and INCLUDES
    assert set(load_scripts()) == {_NAME.fullmatch(p.name).group(1) for p in SCRIPTS}  # type: ignore[union-attr]


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_every_script_header_names_each_key_and_argument_on_a_line_of_its_own(path: Path) -> None:
    """KEYS[1..n] (n from the file name) and every ARGV the script reads, once each, one per line, in order."""
    match = _NAME.fullmatch(path.name)
    assert match, f"{path.name}: scripts are named <operation>-<number of keys>.lua"
    text = path.read_text("utf-8")
    header, body = _header(text), text[len(_header(text)) :]
    keys: list[int] = []
    argv: list[tuple[int, bool]] = []
    for line in header.splitlines():
        mentions = re.findall(r"(?<![\w.])(?:KEYS|ARGV)\[\d+(?:\.\.)?\]", line)
        entry = _ENTRY.match(line)
        if entry is None:
            continue
        assert len(mentions) == 1, f"{path.name}: one KEYS/ARGV entry per header line: {line.strip()!r}"
        if entry.group(1) == "KEYS":
            keys.append(int(entry.group(2)))
        else:
            argv.append((int(entry.group(2)), bool(entry.group(3))))
    assert keys == list(range(1, int(match.group(2)) + 1)), f"{path.name}: header names KEYS {keys}"
    numbers = [n for n, _ in argv]
    assert numbers == list(range(1, len(argv) + 1)), f"{path.name}: header names ARGV {numbers}, not 1..n in order"
    assert all(not ranged for _, ranged in argv[:-1]), f"{path.name}: only the last ARGV entry may be a range"
    used_keys = {int(n) for n in re.findall(r"KEYS\[(\d+)\]", body)}
    assert used_keys <= set(keys), f"{path.name}: reads KEYS {sorted(used_keys - set(keys))} its header omits"
    last, ranged = argv[-1] if argv else (0, False)
    for n in {int(n) for n in re.findall(r"ARGV\[(\d+)\]", body)}:
        assert n <= last or ranged, f"{path.name}: reads ARGV[{n}], which its header does not name"


def test_the_pool_prefix_is_derived_by_one_named_helper() -> None:
    """``string.sub(KEYS[1], 1, -6)`` said nothing; pool scripts call ``pool_base`` (includes/ready.lua)."""
    for path in SCRIPTS + INCLUDES:
        text = path.read_text("utf-8")
        assert "string.sub(KEYS" not in text, f"{path.name} cuts a key by hand; use pool_base()"
        assert not re.search(r"\blocal B\b", text), f"{path.name}: name the pool prefix `base`"
        if "pool_base(" in text and path.parent.name != "includes":
            assert '--- @include "ready"' in text, f"{path.name} calls pool_base without including ready"


LEGENDS = {
    "item": ITEM_FIELDS,
    "worker": WORKER_FIELDS,
    "lock": LOCK_FIELDS,
    "version": VERSION_FIELDS,
    "group": GROUP_FIELDS,
    "group pool": GROUP_POOL_FIELDS,
}


def _kind(script: str, target: str) -> str | None:
    """Which hash a command's target is: by its key expression, else by the script it is in."""
    if target == "item" or "'i:'" in target:
        return "item"
    if target == "state" or "'g:'" in target:
        return "group"
    if "'gpool'" in target:
        return "group pool"
    if script.startswith("lock_"):
        return "lock"
    if script in _WORKER_SCRIPTS:
        return "worker"
    if script == "init_version":
        return "version"
    return None


def test_every_hash_field_the_scripts_use_is_in_the_legend() -> None:
    used: dict[str, set[str]] = {kind: set() for kind in LEGENDS}
    for path in SCRIPTS + INCLUDES:
        script = path.name.split("-")[0].removesuffix(".lua")
        for args in _calls(path.read_text("utf-8")):
            if args[0].strip("'") not in _HASH_COMMANDS:
                continue
            fields = _fields(args)
            if not fields:
                continue  # fields named by data (dedup keys, pool names, budget keys, shared state)
            kind = _kind(script, args[1])
            assert kind is not None, f"{path.name}: {args[0]} on {args[1]}: which hash is this?"
            unknown = [f for f in fields if f not in LEGENDS[kind]]
            assert not unknown, f"{path.name}: {args[0]} {args[1]} uses fields {unknown} missing from keys.py"
            used[kind].update(fields)
    assert all(used.values()), f"every legend describes a hash the scripts use: {used}"


@pytest.mark.parametrize(
    ("module", "variable", "legends"),
    [
        ("backend.py", "h", (ITEM_FIELDS, WORKER_FIELDS)),
        ("locks.py", "record", (LOCK_FIELDS,)),
        ("schema.py", "record", (VERSION_FIELDS,)),
    ],
)
def test_every_hash_field_python_reads_is_in_the_legend(
    module: str, variable: str, legends: tuple[dict[str, str], ...]
) -> None:
    text = (PACKAGE / module).read_text("utf-8")
    read = set(re.findall(rf'\b{variable}(?:\[|\.get\()"([a-z]+)"', text))
    assert read, f"{module} reads hash fields through {variable}[...]"
    known = set().union(*legends)
    assert read <= known, f"{module} reads {sorted(read - known)}, missing from the legend in keys.py"
