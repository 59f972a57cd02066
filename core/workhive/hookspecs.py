# mypy: disable-error-code="empty-body"
"""The hooks a workhive plugin can implement.

Factory hooks (``workhive_storage``, ``workhive_locks``, ``workhive_backoff``,
``workhive_credentials``) return one descriptor or an iterable of them; they
are called once when the plugin manager loads, never per operation. Event
hooks are called after the fact and must be quick: a slow observer slows the
worker that triggered it.

A plugin is a module (or object) with functions marked ``@workhive.hookimpl``,
registered under the entry-point group ``workhive``::

    # pyproject.toml of your distribution
    [project.entry-points.workhive]
    my-plugin = "my_package.plugin"
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    import click

    from workhive.models import ReapedWorker, WorkItem
    from workhive.plugin_types import BackoffPlugin, CredentialsPlugin, LocksPlugin, StoragePlugin

PROJECT = "workhive"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def workhive_storage() -> StoragePlugin | Iterable[StoragePlugin]:
    """Declare storage backends.

    A complete plugin that stores items in a remote service::

        import workhive

        def _open(url: str, **options):
            from my_package.backend import MyBackend  # the driver loads only here
            return MyBackend(url, **options)

        @workhive.hookimpl
        def workhive_storage():
            return workhive.StoragePlugin(
                name="mystore",
                factory=_open,
                description="Items in MyStore",
                schemes=("mystore", "mystores"),
                options=("clock", "create"),  # what _open takes: others are a ConfigError
            )

    ``workhive.open("mystore://host/db")`` then calls ``_open`` with that URL;
    ``workhive.open("mystore://host/db", creat=False)`` raises ``ConfigError``
    naming ``creat`` before ``_open`` runs.
    """


@hookspec
def workhive_locks() -> LocksPlugin | Iterable[LocksPlugin]:
    """Declare lock providers.

    A complete plugin::

        import workhive

        def _open(url: str):
            from my_package.locks import MyLocks
            return MyLocks(url)

        @workhive.hookimpl
        def workhive_locks():
            return workhive.LocksPlugin(name="mylocks", factory=_open, description="Locks in MyStore")

    Selected with ``workhive.open(storage_url, locks="mylocks://…")``.
    """


@hookspec
def workhive_backoff() -> BackoffPlugin | Iterable[BackoffPlugin]:
    """Declare backoff strategies.

    A complete plugin::

        import workhive

        class Linear:
            def __init__(self, step: float = 1.0, cap: float = 60.0) -> None:
                self.step, self.cap = step, cap

            def delay(self, attempt: int, retry_after: float | None = None) -> float:
                if retry_after is not None:
                    return min(retry_after, self.cap)
                return min(self.cap, self.step * attempt)

        @workhive.hookimpl
        def workhive_backoff():
            return workhive.BackoffPlugin(name="linear", factory=Linear, description="step × attempt")

    Selected with ``backoff="linear?step=2"``.
    """


@hookspec
def workhive_credentials() -> CredentialsPlugin | Iterable[CredentialsPlugin]:
    """Declare credential providers.

    A complete plugin::

        import workhive

        class FromFile:
            def __init__(self, path: str) -> None:
                self.path = path

            def credentials(self):
                from workhive.credentials import Credential, Secret
                with open(self.path) as f:
                    for i, line in enumerate(f):
                        if line.strip():
                            yield Credential(name=f"file-{i}", secret=Secret(line.strip()))

        @workhive.hookimpl
        def workhive_credentials():
            return workhive.CredentialsPlugin(name="file", factory=FromFile, description="one key per line")

    Selected with ``credentials=["file:/run/secrets/keys"]``.
    """


@hookspec
def workhive_cli_commands() -> click.Command | Iterable[click.Command]:
    """Add commands to the ``workhive`` CLI (click commands or groups).

    Called when the CLI meets a command name that is not built in, or lists
    its commands; a name that is built in, or that two plugins both add, is
    refused. Import heavy modules inside the command, not at module level:
    the CLI imports every plugin at start-up. A complete plugin::

        import click
        import workhive

        @click.command("hello")
        @click.argument("pool")
        @click.pass_obj
        def hello(cli, pool):
            "Push a greeting to POOL."
            async def push():
                async with cli.hive() as hive:
                    return await hive.pool(pool).push({"hello": "world"})
            click.echo(cli.run(push))

        @workhive.hookimpl
        def workhive_cli_commands():
            return [hello]

    ``workhive hello emails`` then runs it; ``cli`` is the CLI's context
    (its ``hive()`` opens the configured storage, ``run()`` runs a coroutine).
    """


@hookspec
def workhive_item_claimed(pool: str, item: WorkItem, worker_id: str) -> None:
    """Called after a worker claimed ``item``.

    Example::

        @workhive.hookimpl
        def workhive_item_claimed(pool, item, worker_id):
            metrics.counter("claimed", pool=pool).inc()
    """


@hookspec
def workhive_item_completed(pool: str, item: WorkItem) -> None:
    """Called after ``item`` (as claimed) was completed.

    Example::

        @workhive.hookimpl
        def workhive_item_completed(pool, item):
            log.info("done %s after %d attempts", item.id, item.attempts)
    """


@hookspec
def workhive_item_failed(pool: str, item: WorkItem, error: str, retry_in: float) -> None:
    """Called after ``item`` failed and was scheduled for retry in ``retry_in`` seconds.

    Example::

        @workhive.hookimpl
        def workhive_item_failed(pool, item, error, retry_in):
            log.warning("%s failed (%s), retry in %.1fs", item.id, error, retry_in)
    """


@hookspec
def workhive_item_poisoned(pool: str, item: WorkItem, error: str) -> None:
    """Called after ``item`` was poisoned (dead-lettered) by a failure.

    Example::

        @workhive.hookimpl
        def workhive_item_poisoned(pool, item, error):
            pager.alert(f"{pool}/{item.id} is dead: {error}")
    """


@hookspec
def workhive_worker_lost(worker: ReapedWorker) -> None:
    """Called after ``reap`` declared a worker lost and released its items.

    Example::

        @workhive.hookimpl
        def workhive_worker_lost(worker):
            log.error("worker %s lost; %d items released", worker.worker_id, worker.released)
    """
