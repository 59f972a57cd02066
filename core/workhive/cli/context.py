"""State shared by CLI commands: options from the group, the plugin manager, config, the hive."""

from __future__ import annotations

import asyncio
import contextlib
import json
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import attrs
import click

from workhive.config import Config, load_config
from workhive.errors import ConfigError, PoolNotFound, StorageUnavailable, WorkhiveError
from workhive.hive import Hive
from workhive.hive import open as open_hive
from workhive.plugin_manager import PluginManager
from workhive.redaction import register_url_password, scrub_data
from workhive.terminal import human
from workhive.urls import redact_url

__all__ = ["CliContext", "pass_cli", "echo", "emit_json", "json_option", "format_age", "table"]

T = TypeVar("T")


@attrs.define
class CliContext:
    """What every command receives: global flags, and lazily the plugins, config and hive.

    >>> CliContext(storage="memory://").config["storage"]  # doctest: +SKIP
    'memory://'
    """

    no_plugins: bool = False
    debug: bool = False
    storage: str | None = None
    config_file: str | None = None
    _manager: PluginManager | None = None
    _config: Config | None = None

    @property
    def manager(self) -> PluginManager:
        """Plugins loaded once; a broken plugin is a warning on stderr, not a crash."""
        if self._manager is None:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                self._manager = PluginManager(entry_points=not self.no_plugins, on_error="warn")
            for w in caught:
                click.echo(f"warning: {w.message}", err=True)
        return self._manager

    def load_config(self, **flags: Any) -> Config:
        """Settings with the group's ``--storage`` and these command ``flags`` on top.

        Defaults that depend on what is installed (the lock provider) ask this context's plugins,
        so ``--no-plugins`` and ``WORKHIVE_DISABLE_PLUGINS`` count there too.
        """
        return load_config({"storage": self.storage, **flags}, config_file=self.config_file, manager=self.manager)

    @property
    def config(self) -> Config:
        """Settings for commands that take no setting flags of their own (cached)."""
        if self._config is None:
            self._config = self.load_config()
        return self._config

    @contextlib.asynccontextmanager
    async def hive(
        self, config: Config | None = None, *, create: bool = True, patient: bool = False
    ) -> AsyncIterator[Hive]:
        """The configured hive, opened; failures to open become ``StorageUnavailable`` naming the URL.

        Commands that only read (or only change what is already there) pass ``create=False``:
        a hive that does not exist is then ``HiveNotFound`` and nothing is created. ``patient``
        (``work``) waits out a store that does not answer yet, within its retry window.
        """
        cfg = config or self.config
        url = cfg["storage"]
        register_url_password(url)
        register_url_password(cfg["locks"])
        hive = self._open(cfg, create)
        try:
            if patient:
                from workhive.runtime.patience import open_within_window

                await open_within_window(hive)
            else:
                await hive.open()
        except WorkhiveError:
            raise
        except Exception as exc:
            # A driver's own error (sqlite3.OperationalError, OSError…) is about *this* URL;
            # say so in one line rather than a traceback.
            raise StorageUnavailable(
                f"cannot open storage {redact_url(url)!r} ({cfg.source('storage')}): {type(exc).__name__}: {exc}",
                url=redact_url(url),
            ) from exc
        try:
            yield hive
        finally:
            await hive.close()

    def _open(self, cfg: Config, create: bool) -> Hive:
        kwargs: dict[str, Any] = dict(
            locks=cfg["locks"],
            backoff=cfg["backoff"],
            manager=self.manager,
            lease=cfg["lease"],
            max_attempts=cfg["max_attempts"],
            reap_after=cfg["reap_after"],
        )
        if create:
            return open_hive(cfg["storage"], **kwargs)
        try:
            return open_hive(cfg["storage"], create=False, **kwargs)
        except (ConfigError, TypeError) as exc:
            # A storage plugin from before every factory took ``create`` refuses the option:
            # open it as it opens (in-memory and server stores create nothing on disk here).
            if "create" not in str(exc):
                raise
            return open_hive(cfg["storage"], **kwargs)

    def run(self, factory: Callable[[], Awaitable[T]]) -> T:
        """Run one coroutine to completion (commands are sync; the API is async)."""

        async def main() -> T:
            return await factory()

        return asyncio.run(main())


pass_cli = click.make_pass_decorator(CliContext)


def emit_json(data: Any) -> None:
    """Print ``data`` as JSON for scripts (one document, trailing newline), secrets scrubbed.

    Strings are exact: JSON escapes control characters itself (``\u001b``).
    """
    click.echo(json.dumps(scrub_data(data), indent=2, sort_keys=True, default=str))


def echo(text: Any, *, err: bool = False, one_line: bool = False) -> None:
    """Print a line for people: secrets scrubbed, control characters shown as escapes.

    Every human-output line of every command goes through here (or ``table``), on a
    terminal or not: stored text (an item's error or result, a worker's host) may hold
    escape sequences that clear the screen or set the clipboard (OSC 52), and a pipe
    often ends at a terminal too. ``--json`` output goes through ``emit_json`` instead.

    >>> echo("boom \x1b[2J")  # doctest: +SKIP
    boom \x1b[2J
    """
    click.echo(human(text, one_line=one_line), err=err)


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


async def require_pool(hive: Hive, name: str) -> None:
    """``PoolNotFound`` listing the known pools unless ``name`` has items."""
    hive.pool(name)  # validates the name first: a bad name is InvalidName, not "not found"
    known = await hive.pools()
    if name not in known:
        listing = ", ".join(sorted(known)) or "none yet"
        raise PoolNotFound(f"no pool named {name!r}; known pools: {listing}", pool=name, known=known)


def format_age(seconds: float | None) -> str:
    """``42s``, ``3m05s``, ``2h10m``, ``-`` for None.

    >>> format_age(185.2), format_age(None)
    ('3m05s', '-')
    """
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s" if seconds >= 1 else f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def table(rows: list[tuple[Any, ...]]) -> None:
    """Print rows as left-aligned columns; the first row is the header.

    Each cell is one line, as ``echo`` shows text: secrets scrubbed, control characters
    (newlines and tabs included, which would break the columns) written as escapes.
    """
    cells = [[human(c, one_line=True) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
