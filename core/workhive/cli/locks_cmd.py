"""``workhive locks``: who holds which lock (overdue holders flagged), and cleaning lock files.

The provider comes from ``--locks URL``, else the ``locks`` setting
(``WORKHIVE_LOCKS``, ``workhive.toml``), else the storage's default: the
storage's own locks when its plugin provides them (PostgreSQL, Redis), else
``fcntl:///.workhive/locks`` (see ``workhive.defaults``).

    workhive locks                 # same as `workhive locks list`
    workhive locks list --json
    workhive locks clean           # delete the files of locks nobody holds
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from workhive.cli.context import CliContext, echo, emit_json, pass_cli, table
from workhive.errors import ConfigError
from workhive.locks import LockHolder, LockProvider
from workhive.terminal import human
from workhive.urls import redact_url, scheme_of

__all__ = ["locks_cmd"]

T = TypeVar("T")

_URL_KEY = "workhive.locks_url"


def _run(cli: CliContext, url: str, action: Callable[[LockProvider], Awaitable[T]]) -> T:
    provider: LockProvider = cli.manager.get("locks", scheme_of(url, "lock URL")).factory(url)
    # A provider that keeps its locks in a directory cannot use a file there: say so rather than
    # list "no locks held" (or clean nothing) as if all were well.
    directory = getattr(provider, "directory", None)
    if isinstance(directory, (str, os.PathLike)) and os.path.exists(directory) and not os.path.isdir(directory):
        raise ConfigError(
            f"lock URL {redact_url(url)!r} points at {os.fspath(directory)!r}, which is a file, not a directory "
            "of lock files; point --locks at a directory (it is created if missing)"
        )

    async def go() -> T:
        try:
            return await action(provider)
        finally:
            await provider.close()

    return asyncio.run(go())


def _shown(name: str, width: int = 60) -> str:
    # Lock names may hold newlines, NULs, escape sequences or 10 KB of text: keep one table row per lock.
    text = human(name, one_line=True)
    return text if len(text) <= width else text[: width - 1] + "…"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def _print_holders(holders: list[LockHolder], as_json: bool) -> None:
    now = time.time()
    if as_json:
        emit_json([h.to_json(now) for h in holders])
        return
    if not holders:
        echo("no locks held")
        return
    rows = [("NAME", "TOKEN", "PID", "HOST", "WORKER", "AGE", "TTL", "STATUS")]
    for h in holders:
        status = "OVERDUE" if h.overdue(now) else "held"
        rows.append(
            (
                _shown(h.name),
                str(h.token),
                str(h.pid),
                h.host,
                h.worker_id or "-",
                _duration(h.age(now)),
                _duration(h.ttl),
                status,
            )
        )
    table(rows)
    overdue = sum(1 for h in holders if h.overdue(now))
    if overdue:
        echo(
            f"{overdue} holder(s) past their ttl: they are not broken; check that process (pid, host above)",
            err=True,
        )


@click.group("locks", invoke_without_command=True)
@click.option(
    "--locks",
    "locks_url",
    default=None,
    help="Lock provider URL [the locks setting: WORKHIVE_LOCKS, workhive.toml, else the storage's default].",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts (when listing).")
@pass_cli
@click.pass_context
def locks_cmd(ctx: click.Context, cli: CliContext, locks_url: str | None, as_json: bool) -> None:
    """Show who holds which lock; `workhive locks clean` deletes unused lock files.

    Without --locks, the provider is the one `workhive work` uses with the same settings:
    the storage's own locks on PostgreSQL or Redis, fcntl:///.workhive/locks otherwise.
    """
    ctx.meta[_URL_KEY] = locks_url if locks_url is not None else cli.config["locks"]
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_cmd, as_json=as_json)


@locks_cmd.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@pass_cli
@click.pass_context
def list_cmd(ctx: click.Context, cli: CliContext, as_json: bool) -> None:
    """List held locks: name, token, pid, host, worker, age, ttl, and OVERDUE past the ttl."""

    async def holders(provider: LockProvider) -> list[LockHolder]:
        return await provider.list_locks()

    _print_holders(_run(cli, ctx.meta[_URL_KEY], holders), as_json)


@locks_cmd.command("clean")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@pass_cli
@click.pass_context
def clean_cmd(ctx: click.Context, cli: CliContext, as_json: bool) -> None:
    """Delete the files of locks nobody holds (each is locked before it is deleted; held ones are kept)."""
    url = ctx.meta[_URL_KEY]

    async def clean(provider: LockProvider) -> list[str]:
        cleaner: Any = getattr(provider, "clean", None)
        if cleaner is None:
            raise ConfigError(
                f"the lock provider for {redact_url(url)!r} keeps no lock files, so there is nothing to clean"
            )
        return list(await cleaner())

    names = _run(cli, url, clean)
    if as_json:
        emit_json({"cleaned": names})
        return
    echo(f"cleaned {len(names)} unused lock file(s)")
    for name in names:
        echo(f"  {_shown(name)}")
