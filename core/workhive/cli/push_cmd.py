"""``workhive push POOL FILE|-``: add JSON-lines items to a pool, all or nothing."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import IO, Any

import attrs
import click

from workhive.cli.context import CliContext, emit_json, json_option, pass_cli
from workhive.errors import InvalidItem
from workhive.models import Job
from workhive.validation import to_json

#: items per backend call: big enough to amortise a transaction, small enough to bound memory per call
CHUNK = 1000


@attrs.frozen
class BadLine:
    """A line that could not become an item, and why."""

    line: int
    error: str


def parse_lines(
    lines: Iterable[str], *, dedup_key_field: str | None = None
) -> tuple[list[tuple[Any, str | None]], list[BadLine]]:
    """Parse JSON lines into ``(data, dedup_key)`` pairs; blank lines are skipped, bad ones reported.

    >>> parse_lines(['{"a": 1}', '', 'nope'])[1]
    [BadLine(line=3, error='not valid JSON: Expecting value (column 1)')]
    """
    good: list[tuple[Any, str | None]] = []
    bad: list[BadLine] = []
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text:
            continue
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            bad.append(BadLine(number, f"not valid JSON: {exc.msg} (column {exc.colno})"))
            continue
        try:
            to_json(data)  # json.loads accepts NaN/Infinity, which workhive refuses
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
            key = str(value)
        good.append((data, key))
    return good, bad


def _read(stream: IO[str], label: str) -> list[str]:
    try:
        return stream.readlines()
    except UnicodeDecodeError as exc:
        raise InvalidItem(f"{label} is not UTF-8 text: {exc.reason} at byte {exc.start}; nothing was pushed") from None


@click.command("push")
@click.argument("pool")
@click.argument("source", metavar="FILE|-", type=click.File("r", encoding="utf-8"))
@click.option("--priority", type=click.IntRange(min=0), default=0, show_default=True, help="Higher is claimed first.")
@click.option("--delay", type=click.FloatRange(min=0), default=0.0, help="Seconds before the items may be claimed.")
@click.option("--max-attempts", type=click.IntRange(min=1), default=None, help="Claims before an item is poisoned.")
@click.option("--dedup-key-field", metavar="FIELD", default=None, help="Use this field of each item as its dedup key.")
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
    dedup_key_field: str | None,
    skip_invalid: bool,
    as_json: bool,
) -> None:
    """Push items from FILE (JSON lines, one item per line; - for stdin) into POOL.

    Every line is checked before anything is written: one bad line and nothing is
    pushed, unless --skip-invalid.

    \b
    Example:
      printf '{"url": "https://a.example"}\\n{"url": "https://b.example"}\\n' | workhive push pages -
    """
    label = "stdin" if source.name == "<stdin>" else source.name
    good, bad = parse_lines(_read(source, label), dedup_key_field=dedup_key_field)
    if bad and not skip_invalid:
        first = bad[0]
        more = f" (and {len(bad) - 1} more bad lines)" if len(bad) > 1 else ""
        raise InvalidItem(
            f"{label} line {first.line}: {first.error}{more}; nothing was pushed "
            "(fix the line, or pass --skip-invalid to push the valid lines)",
            line=first.line,
            bad_lines=bad,
        )
    jobs = [Job(data, priority=priority, delay=delay, max_attempts=max_attempts, dedup_key=key) for data, key in good]

    async def push() -> list[str]:
        async with cli.hive() as hive:
            target = hive.pool(pool)
            ids: list[str] = []
            for start in range(0, len(jobs), CHUNK):
                ids.extend(await target.push_many(jobs[start : start + CHUNK]))
            return ids

    ids = cli.run(push)
    if as_json:
        emit_json({"pool": pool, "pushed": len(ids), "ids": ids, "skipped": [attrs.asdict(b) for b in bad]})
        return
    click.echo(f"pushed {len(ids)} item{'s' if len(ids) != 1 else ''} to {pool}")
    for b in bad:
        click.echo(f"skipped {label} line {b.line}: {b.error}", err=True)
