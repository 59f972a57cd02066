"""``workhive push POOL FILE|-``: add JSON-lines items to a pool, every line checked before any is written."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import IO, Any

import attrs
import click

from workhive.cli.context import CliContext, echo, emit_json, json_option, pass_cli
from workhive.errors import InvalidArgument, InvalidItem, InvalidName, StorageError, WorkhiveError
from workhive.models import Job
from workhive.validation import (
    MAX_DEPTH,
    MAX_INT_DIGITS,
    check_count,
    check_dedup_key,
    check_group,
    check_nonnegative,
    check_positive,
    to_json,
)

#: items per backend call (one transaction each): big enough to amortise a commit, small enough
#: that one push never holds the storage's write lock for long while a fleet is claiming
CHUNK = 1000


@attrs.frozen
class BadLine:
    """A line that could not become an item, and why."""

    line: int
    error: str


@attrs.frozen
class GoodLine:
    """A line that became an item: its number in the file, its data, dedup key and group."""

    line: int
    data: Any
    dedup_key: str | None = None
    group: str | None = None


def _decode(text: str) -> Any:
    """The line's JSON value, or InvalidItem saying what is wrong with the line (never another error)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidItem(f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise InvalidItem(f"it is nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:  # the only other ValueError json.loads raises: an over-long integer literal
        if "digits" not in str(exc):
            raise InvalidItem(f"not valid JSON: {exc}") from None
        raise InvalidItem(
            f"an integer has more than {MAX_INT_DIGITS} digits, which JSON readers refuse (store it as a string)"
        ) from None


def _group_of(data: Any, group_field: str) -> str:
    """The group named by ``data[group_field]``; InvalidItem/InvalidName saying what is wrong otherwise."""
    value = data.get(group_field) if isinstance(data, dict) else None
    if not isinstance(value, str):
        found = "no such field" if not isinstance(data, dict) or group_field not in data else f"{value!r}"
        raise InvalidItem(f"--group-field {group_field!r}: the item has no group name there ({found}; want a string)")
    try:
        return check_group(value)
    except InvalidName as exc:
        raise InvalidName(f"--group-field {group_field!r}: {exc}", name=value) from None


def parse_lines(
    lines: Iterable[str], *, dedup_key_field: str | None = None, group_field: str | None = None
) -> tuple[list[GoodLine], list[BadLine]]:
    """Parse JSON lines into items; blank lines are skipped, bad ones reported with their number.

    Each good line has passed every check ``Pool.push_many`` makes of data,
    dedup key and group, so pushing them cannot be refused for what a line holds.

    >>> parse_lines(['{"a": 1}', '', 'nope'])[1]
    [BadLine(line=3, error='not valid JSON: Expecting value (column 1)')]
    >>> parse_lines(['{"tenant": "t-1"}', '{"tenant": 7}'], group_field="tenant")[0][0].group
    't-1'
    """
    good: list[GoodLine] = []
    bad: list[BadLine] = []
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text:
            continue
        try:
            data = _decode(text)
            to_json(data)  # json.loads accepts what workhive refuses: NaN, lone surrogates, too deep
        except InvalidItem as exc:
            bad.append(BadLine(number, str(exc)))
            continue
        key: str | None = None
        if dedup_key_field is not None:
            value = data.get(dedup_key_field) if isinstance(data, dict) else None
            if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
                bad.append(
                    BadLine(number, f"--dedup-key-field {dedup_key_field!r}: the item has no string or integer there")
                )
                continue
            try:
                key = check_dedup_key(str(value))
            except InvalidArgument as exc:
                bad.append(BadLine(number, f"--dedup-key-field {dedup_key_field!r}: {exc}"))
                continue
        group: str | None = None
        if group_field is not None:
            try:
                group = _group_of(data, group_field)
            except (InvalidItem, InvalidName) as exc:
                bad.append(BadLine(number, str(exc)))
                continue
        good.append(GoodLine(number, data, key, group))
    return good, bad


def _read(stream: IO[str], label: str) -> list[str]:
    try:
        return stream.readlines()
    except UnicodeDecodeError as exc:
        raise InvalidItem(f"{label} is not UTF-8 text: {exc.reason} at byte {exc.start}; nothing was pushed") from None


def _partly_pushed(exc: BaseException, label: str, pool: str, pushed: int, first_unpushed: int) -> WorkhiveError:
    """The error of a batch that failed after earlier batches were written: it says what is stored."""
    what = exc.message if isinstance(exc, WorkhiveError) else f"{type(exc).__name__}: {exc}"
    message = (
        f"{what}; {pushed} item{'s' if pushed != 1 else ''} (the lines before {label} line {first_unpushed}) "
        f"were pushed to {pool} before the failure, and none from line {first_unpushed} on: push those with "
        f"`tail -n +{first_unpushed} FILE | workhive push {pool} -` (or re-run with --dedup-key-field "
        "to skip what is stored)"
    )
    cls = type(exc) if isinstance(exc, WorkhiveError) else StorageError
    try:
        return cls(message, pushed=pushed, first_unpushed_line=first_unpushed)
    except TypeError:  # a subclass with a constructor of its own
        return StorageError(message, pushed=pushed, first_unpushed_line=first_unpushed)


@click.command("push")
@click.argument("pool")
@click.argument("source", metavar="FILE|-", type=click.File("r", encoding="utf-8"))
@click.option("--priority", type=click.IntRange(min=0), default=0, show_default=True, help="Higher is claimed first.")
@click.option("--delay", type=click.FloatRange(min=0), default=0.0, help="Seconds before the items may be claimed.")
@click.option("--max-attempts", type=click.IntRange(min=1), default=None, help="Claims before an item is poisoned.")
@click.option(
    "--timeout",
    type=float,
    default=None,
    help="Seconds each item's handler may run (instead of the fleet's --timeout); > 0.",
)
@click.option("--dedup-key-field", metavar="FIELD", default=None, help="Use this field of each item as its dedup key.")
@click.option("--group", "group", metavar="NAME", default=None, help="Push every item to this group (tenant).")
@click.option(
    "--group-field",
    metavar="FIELD",
    default=None,
    help="This field of each item names its group (a string); an item without one is a bad line.",
)
@click.option("--skip-invalid", is_flag=True, help="Push the valid lines and report the bad ones (default: push none).")
@json_option
@pass_cli
def push_cmd(
    cli: CliContext,
    pool: str,
    source: IO[str],
    priority: int,
    delay: float,
    max_attempts: int | None,
    timeout: float | None,
    dedup_key_field: str | None,
    group: str | None,
    group_field: str | None,
    skip_invalid: bool,
    as_json: bool,
) -> None:
    """Push items from FILE (JSON lines, one item per line; - for stdin) into POOL.

    Every line is checked before anything is written: one bad line (bad JSON,
    text that is not valid Unicode, nesting deeper than 256 levels, an integer of
    more than 4300 digits…) is named by its number and nothing is pushed, unless
    --skip-invalid.

    The checked items are then written in batches of 1000, each batch one
    transaction. If the storage fails part-way (disk full, server gone), the
    batches before the failure stay pushed and none after: the error says how
    many items were pushed and the first line that was not, so you can push the
    rest (or re-run with --dedup-key-field, which skips items already stored).

    Items may carry a group (a tenant: claims serve the groups in turn, see
    docs/groups.md): --group NAME for all of them, or --group-field FIELD to
    take each item's group from its field FIELD (a line without a string there
    is a bad line).

    \b
    Example:
      printf '{"url": "https://a.example"}\\n{"url": "https://b.example"}\\n' | workhive push pages -
      workhive push pages --group-field tenant pages.jsonl
    """
    label = "stdin" if source.name == "<stdin>" else source.name
    # The same checks Pool.push makes, once for the options shared by every line.
    check_count("--priority", priority, minimum=0)
    check_nonnegative("--delay", delay)
    if max_attempts is not None:
        check_count("--max-attempts", max_attempts)
    if timeout is not None:
        check_positive("--timeout", timeout)
    if group is not None and group_field is not None:
        raise InvalidArgument(
            "--group and --group-field both name the items' group: give one (--group NAME for every item, "
            "--group-field FIELD to read it from each item)"
        )
    if group is not None:
        try:
            check_group(group)
        except InvalidName as exc:
            raise InvalidName(f"--group: {exc}", name=group) from None
    good, bad = parse_lines(_read(source, label), dedup_key_field=dedup_key_field, group_field=group_field)
    if bad and not skip_invalid:
        first = bad[0]
        more = f" (and {len(bad) - 1} more bad lines)" if len(bad) > 1 else ""
        raise InvalidItem(
            f"{label} line {first.line}: {first.error}{more}; nothing was pushed "
            "(fix the line, or pass --skip-invalid to push the valid lines)",
            line=first.line,
            bad_lines=bad,
        )

    async def push() -> list[str]:
        async with cli.hive() as hive:
            target = hive.pool(pool)
            ids: list[str] = []
            for start in range(0, len(good), CHUNK):
                batch = good[start : start + CHUNK]
                jobs = [
                    Job(
                        g.data,
                        priority=priority,
                        delay=delay,
                        max_attempts=max_attempts,
                        dedup_key=g.dedup_key,
                        timeout=timeout,
                        group=group if g.group is None else g.group,
                    )
                    for g in batch
                ]
                try:
                    ids.extend(await target.push_many(jobs))
                except Exception as exc:
                    if not ids:
                        raise
                    raise _partly_pushed(exc, label, pool, len(ids), batch[0].line) from exc
            return ids

    ids = cli.run(push)
    if as_json:
        emit_json({"pool": pool, "pushed": len(ids), "ids": ids, "skipped": [attrs.asdict(b) for b in bad]})
        return
    echo(f"pushed {len(ids)} item{'s' if len(ids) != 1 else ''} to {pool}")
    for b in bad:
        echo(f"skipped {label} line {b.line}: {b.error}", err=True)
