"""What the supervisor (parent) and its worker processes (children) share.

The parent writes a ``FleetOptions`` as JSON on the child's stdin
(``options_to_json`` / ``options_from_json``); both open the hive the same way
(``open_hive``) and build the fleet's keys and budgets the same way
(``build_credentials``, ``build_budgets``: the parent once, to refuse bad
configuration before any process starts). ``EXIT_UNHEALTHY`` and
``PATH_AFTER_ENV`` are the exit code and environment variable that pass
between them; ``PLUGINS_FOUND_ENV`` hands the children the plugins the parent
found, so that they load the same ones without reading the installed metadata.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import attrs

import workhive
from workhive.errors import ConfigError
from workhive.hive import Hive
from workhive.plugin_manager import FoundPlugin, PluginManager
from workhive.redaction import register_url_password
from workhive.runtime.call_counts import COUNT_CALLS_ENV, CountingBackend
from workhive.runtime.options import FleetOptions
from workhive.workers import Workers

if TYPE_CHECKING:
    from workhive.budgets import FleetBudgets
    from workhive.credentials import CredentialPool

__all__ = [
    "EXIT_UNHEALTHY",
    "PATH_AFTER_ENV",
    "PLUGINS_FOUND_ENV",
    "build_budgets",
    "build_credentials",
    "metrics_enabled",
    "found_from_env",
    "found_to_env",
    "open_hive",
    "options_from_json",
    "options_to_json",
]

#: a process whose workers spent their recovery budget exits with this; the supervisor replaces it
EXIT_UNHEALTHY = 3

#: import-path entries the supervisor had after its site-packages, which a worker process appends
#: to its own (PYTHONPATH would put them first; see ``supervisor._child_env``)
PATH_AFTER_ENV = "WORKHIVE_PATH_AFTER"

#: the core's version and the plugin entry points the supervisor found (``PluginManager.found``) as JSON;
#: a worker process loads these instead of reading every installed distribution's metadata
PLUGINS_FOUND_ENV = "WORKHIVE_PLUGINS_FOUND"


def found_to_env(found: tuple[str, tuple[FoundPlugin, ...]]) -> str:
    """``PluginManager.found`` as the value of ``PLUGINS_FOUND_ENV``."""
    return json.dumps([found[0], [plugin.to_json() for plugin in found[1]]])


def found_from_env(text: str) -> tuple[str, tuple[FoundPlugin, ...]] | None:
    """What ``found_to_env`` wrote; None (read the metadata then) when empty or malformed."""
    if not text:
        return None
    try:
        version, plugins = json.loads(text)
        return str(version), tuple(FoundPlugin.from_json(p) for p in plugins)
    except (ValueError, TypeError):
        return None


def options_to_json(options: FleetOptions) -> dict[str, Any]:
    """``options`` as the JSON object the supervisor writes on a worker process's stdin."""
    return attrs.asdict(options, recurse=False) | {"credentials": list(options.credentials)}


def options_from_json(data: dict[str, Any]) -> FleetOptions:
    """The ``FleetOptions`` a worker process read from its stdin (``TypeError`` on unknown fields)."""
    return FleetOptions(**data)


def metrics_enabled(options: FleetOptions) -> bool:
    """Whether this process counts for ``--metrics-port`` (the supervisor set up the shared directory)."""
    from workhive.metrics import ENV

    return options.metrics_port is not None and bool(os.environ.get(ENV))


def open_hive(options: FleetOptions, found: tuple[str, tuple[FoundPlugin, ...]] | None = None) -> Hive:
    """The fleet's hive, not opened yet: storage, locks, backoff and plugins; URL passwords registered as secrets.

    ``found``: the plugins to load instead of reading the installed metadata (a worker
    process gets its supervisor's).
    """
    register_url_password(options.storage)
    register_url_password(options.locks)
    extra: list[tuple[str, object]] = []
    if metrics_enabled(options):
        from workhive.metrics import MetricsPlugin

        extra.append(("workhive-metrics", MetricsPlugin()))
    manager = PluginManager(entry_points=not options.no_plugins, on_error="warn", extra=extra, found=found)
    hive = workhive.open(
        options.storage,
        locks=options.locks,
        backoff=options.backoff,
        manager=manager,
        lease=options.lease,
        max_attempts=options.max_attempts,
        reap_after=options.reap_after,
    )
    count_into = os.environ.get(COUNT_CALLS_ENV)
    if count_into:  # benchmarks: storage calls per item (bench/waiting.py)
        hive.storage = CountingBackend(hive.storage, count_into)  # type: ignore[assignment]
        hive.workers = Workers(hive)  # the registry's calls through it too
    return hive


def build_credentials(options: FleetOptions, hive: Hive) -> CredentialPool | None:
    """The fleet's ``CredentialPool`` (cooldowns shared through the hive), or None without credentials."""
    if not options.credentials:
        return None
    from workhive.credentials import DEFAULT_NAMESPACE, CredentialPool

    return CredentialPool.from_specs(
        list(options.credentials), manager=hive.manager, shared=hive.shared(DEFAULT_NAMESPACE)
    )


def build_budgets(options: FleetOptions, hive: Hive, credentials: CredentialPool | None) -> FleetBudgets | None:
    """The fleet's ``FleetBudgets``, or None when no key has a budget and limits are not learned.

    ``ConfigError`` when budgets are configured on a storage backend without the
    ``TakesBudget`` capability (naming its plugin), or when the fleet's default
    token estimate could never fit a key's tpm/tpd budget.
    """
    if credentials is None:
        if options.learn_limits:
            raise ConfigError("learn_limits (--learn-limits) learns each key's limit: give keys with --credentials")
        return None
    from workhive.budgets import BUDGET_NAMESPACE, FleetBudgets, TakesBudget
    from workhive.errors import BudgetUnsatisfiable

    keys = credentials.credentials()
    if not options.learn_limits and all(c.budget is None or c.budget.empty for c in keys):
        return None
    if not isinstance(hive.storage, TakesBudget):
        plugin = (hive.storage_url or "").split(":", 1)[0] or type(hive.storage).__name__
        raise ConfigError(
            f"rate budgets are configured (credential budgets or --learn-limits), but the storage plugin "
            f"{plugin!r} ({type(hive.storage).__name__}) cannot keep them: it does not implement "
            "workhive.budgets.TakesBudget. Use a backend that does (memory, sqlite, redis) or drop the budgets",
            plugin=plugin,
        )
    budgets = FleetBudgets(hive.storage, hive.shared(BUDGET_NAMESPACE), keys, learn=options.learn_limits)
    try:
        budgets.check_tokens(options.token_estimate)
    except BudgetUnsatisfiable as exc:
        raise ConfigError(f"--token-estimate: {exc}") from None
    return budgets
