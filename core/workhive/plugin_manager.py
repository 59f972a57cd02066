"""Finding, loading and choosing plugins.

Plugins are modules registered under the entry-point group ``workhive``; the
entry-point name is the plugin's name (what ``WORKHIVE_DISABLE_PLUGINS``
blocks). The core's own built-ins go through the same registration path.

Entry points are read with ``importlib.metadata`` — the API pluggy's own
loader uses — one at a time, so that a plugin that fails to import can be
reported (``on_error="warn"``, the CLI) or raised (``on_error="raise"``, the
library default) without hiding the others. What was read is kept
(``PluginManager.found``): a fleet's worker processes load the plugins their
supervisor found (``found=``) instead of reading every installed distribution's
metadata again, which with the import of ``importlib.metadata`` itself (zipfile,
email, csv) was about a fifth of a worker's CPU before its first claim.

>>> manager = PluginManager(entry_points=False)
>>> "full-jitter" in manager.names("backoff")
True
"""

from __future__ import annotations

import importlib
import os
import warnings
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import attrs
import pluggy

from workhive import hookspecs
from workhive.errors import PluginConflict, PluginLoadError, PluginNotFound, PluginValidationError
from workhive.plugin_types import PLUGIN_KINDS

__all__ = ["FoundPlugin", "PluginInfo", "PluginManager", "default_manager", "ENTRY_POINT_GROUP", "KNOWN_PACKAGES"]

ENTRY_POINT_GROUP = "workhive"

#: modules of the core registered as built-in plugins: (plugin name, module)
BUILTINS: tuple[tuple[str, str], ...] = (("builtin-backoff", "workhive.backoff"),)

#: names users commonly ask for, and the pip package that provides them
KNOWN_PACKAGES = {
    "memory": "workhive-memory",
    "sqlite": "workhive-sqlite",
    "fcntl": "workhive-fcntl-locks",
    "env": "workhive-env-credentials",
    "postgres": "workhive-postgres",
    "postgresql": "workhive-postgres",
    "redis": "workhive-redis",
}

EVENT_HOOKS = (
    "workhive_item_claimed",
    "workhive_item_completed",
    "workhive_item_failed",
    "workhive_item_poisoned",
    "workhive_worker_lost",
)

Status = Literal["active", "blocked", "failed"]


@attrs.frozen
class PluginInfo:
    """One plugin as ``workhive plugins`` reports it."""

    name: str
    distribution: str
    version: str
    status: Status
    provides: dict[str, tuple[str, ...]] = attrs.field(factory=dict)
    error: str | None = None
    builtin: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "status": self.status,
            "provides": {k: list(v) for k, v in self.provides.items()},
            "error": self.error,
            "builtin": self.builtin,
        }


@attrs.frozen
class FoundPlugin:
    """One entry point of the ``workhive`` group as read from the installed metadata."""

    name: str
    value: str  # "module" or "module:attribute.path", as in the entry point
    distribution: str
    version: str

    def to_json(self) -> list[str]:
        return [self.name, self.value, self.distribution, self.version]

    @classmethod
    def from_json(cls, data: Sequence[str]) -> FoundPlugin:
        name, value, distribution, version = data
        return cls(name, value, distribution, version)

    def load(self) -> object:
        """Import the entry point's object, as ``importlib.metadata.EntryPoint.load`` does."""
        module_name, _, attribute = self.value.partition(":")
        obj: object = importlib.import_module(module_name.strip())
        for part in filter(None, attribute.strip().split(".")):
            obj = getattr(obj, part)
        return obj


def find_plugins() -> tuple[str, tuple[FoundPlugin, ...]]:
    """The core's version and the ``workhive`` entry points installed, from the packages' metadata.

    The same distribution seen twice on ``sys.path`` gives its entry points once.
    """
    # Imported here: importlib.metadata (with zipfile, email, csv) is needed only to read the
    # metadata, which a worker process is handed by its supervisor instead (``found=``).
    import importlib.metadata as md

    core_version = _core_version()
    found: dict[tuple[str, str], FoundPlugin] = {}
    for ep in md.entry_points(group=ENTRY_POINT_GROUP):
        if (ep.name, ep.value) in found:
            continue
        dist = ep.dist
        dist_name, version = (dist.metadata["Name"], dist.version) if dist is not None else ("(unknown)", "")
        found[(ep.name, ep.value)] = FoundPlugin(ep.name, ep.value, dist_name, version)
    return core_version, tuple(found.values())


def _core_version() -> str:
    import importlib.metadata as md  # see find_plugins

    try:
        return md.version("workhive")
    except md.PackageNotFoundError:  # running from a source tree without install
        return "0+unknown"


def disabled_from_env() -> frozenset[str]:
    """Plugin names listed in ``WORKHIVE_DISABLE_PLUGINS`` (comma-separated)."""
    raw = os.environ.get("WORKHIVE_DISABLE_PLUGINS", "")
    return frozenset(part.strip() for part in raw.split(",") if part.strip())


class PluginManager:
    """Loads plugins once and answers "which descriptor has this name?".

    ``entry_points=False`` loads the built-ins only (``--no-plugins``).
    ``disabled`` defaults to ``WORKHIVE_DISABLE_PLUGINS``.
    ``on_error="warn"`` turns a plugin that fails to import into a warning.
    ``found`` (the core's version and the entry points, as another manager's ``found``)
    is used instead of reading the installed metadata: a fleet's worker processes get
    their supervisor's, so both load the same plugins.
    """

    def __init__(
        self,
        *,
        entry_points: bool = True,
        disabled: Iterable[str] | None = None,
        on_error: Literal["raise", "warn"] = "raise",
        extra: Iterable[tuple[str, object]] = (),
        found: tuple[str, Sequence[FoundPlugin]] | None = None,
    ) -> None:
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        self.disabled = frozenset(disabled) if disabled is not None else disabled_from_env()
        self.on_error = on_error
        self._info: dict[str, PluginInfo] = {}
        self._dist: dict[str, tuple[str, str]] = {}
        #: the core's version and the entry points read (none without ``entry_points``)
        self.found: tuple[str, tuple[FoundPlugin, ...]]
        if found is not None:
            self.found = (found[0], tuple(found[1]) if entry_points else ())
        elif entry_points:
            self.found = find_plugins()
        else:
            self.found = (_core_version(), ())
        core = ("workhive", self.found[0])
        for name, module in BUILTINS:
            self._register(name, importlib.import_module(module), core, builtin=True)
        for name, plugin in extra:
            self._register(name, plugin, ("(registered in code)", ""), builtin=False)
        self._load_entry_points(self.found[1])
        self._descriptors: dict[str, dict[str, Any]] = {}
        self._by_scheme: dict[str, dict[str, Any]] = {}
        self._collect()
        # Resolved once: the facade checks these booleans, never pluggy, per operation.
        self.event_hooks: dict[str, bool] = {
            name: bool(getattr(self._pm.hook, name).get_hookimpls()) for name in EVENT_HOOKS
        }

    # -- loading ------------------------------------------------------------
    def _load_entry_points(self, found: Iterable[FoundPlugin]) -> None:
        for ep in found:
            dist_info = (ep.distribution, ep.version)
            if ep.name in self.disabled:
                self._info[ep.name] = PluginInfo(ep.name, *dist_info, status="blocked")
                continue
            if ep.name in self._info:
                other = self._info[ep.name]
                raise PluginConflict(
                    f"plugin name {ep.name!r} is registered by both {other.distribution} {other.version} "
                    f"and {dist_info[0]} {dist_info[1]}; uninstall one of them",
                    name=ep.name,
                )
            try:
                plugin = ep.load()
            except Exception as exc:
                message = (
                    f"plugin {ep.name!r} from {dist_info[0]} {dist_info[1]} failed to import: "
                    f"{type(exc).__name__}: {exc}. Reinstall it, or block it with "
                    f"WORKHIVE_DISABLE_PLUGINS={ep.name}"
                )
                if self.on_error == "raise":
                    raise PluginLoadError(message, name=ep.name, distribution=dist_info[0]) from exc
                warnings.warn(message, RuntimeWarning, stacklevel=2)
                self._info[ep.name] = PluginInfo(ep.name, *dist_info, status="failed", error=str(exc))
                continue
            self._register(ep.name, plugin, dist_info, builtin=False)

    def _register(self, name: str, plugin: object, dist: tuple[str, str], *, builtin: bool) -> None:
        if name in self.disabled and not builtin:
            self._info[name] = PluginInfo(name, *dist, status="blocked")
            return
        self._pm.register(plugin, name=name)
        self._dist[name] = dist
        self._info[name] = PluginInfo(name, *dist, status="active", builtin=builtin)

    def _collect(self) -> None:
        for kind, (hook_name, cls) in PLUGIN_KINDS.items():
            by_name: dict[str, Any] = {}
            by_scheme: dict[str, Any] = {}
            owner: dict[str, str] = {}
            for impl in getattr(self._pm.hook, hook_name).get_hookimpls():
                plugin_name = impl.plugin_name
                for desc in self._descriptors_of(impl.function(), cls, plugin_name):
                    keys = [desc.name]
                    if hasattr(desc, "all_schemes"):
                        keys = list(desc.all_schemes)
                    for key in keys:
                        if key in owner and owner[key] != plugin_name:
                            a, b = self._dist[owner[key]], self._dist[plugin_name]
                            raise PluginConflict(
                                f"two plugins provide {kind} {key!r}: {owner[key]!r} from {a[0]} {a[1]} and "
                                f"{plugin_name!r} from {b[0]} {b[1]}; uninstall one, or block it with "
                                f"WORKHIVE_DISABLE_PLUGINS={plugin_name}",
                                kind=kind,
                                name=key,
                            )
                        owner[key] = plugin_name
                        by_scheme[key] = desc
                    by_name[desc.name] = desc
                    info = self._info[plugin_name]
                    provides = dict(info.provides)
                    provides[kind] = (*provides.get(kind, ()), desc.name)
                    self._info[plugin_name] = attrs.evolve(info, provides=provides)
            self._descriptors[kind] = by_name
            self._by_scheme[kind] = by_scheme

    def _descriptors_of(self, result: object, cls: type, plugin_name: str, label: str | None = None) -> list[Any]:
        if result is None:
            return []
        items = [result] if isinstance(result, cls) else result
        try:
            items = list(items)  # type: ignore[call-overload]
        except TypeError:
            items = [result]
        for item in items:
            if not isinstance(item, cls):
                dist = self._dist.get(plugin_name, ("?", "?"))
                raise PluginValidationError(
                    f"plugin {plugin_name!r} ({dist[0]} {dist[1]}) returned {item!r} from its "
                    f"{cls.__name__} hook; expected {label or 'workhive.' + cls.__name__} instances",
                    plugin=plugin_name,
                )
        return items

    # -- queries ------------------------------------------------------------
    @property
    def hook(self) -> Any:
        """The pluggy hook relay, for calling event hooks."""
        return self._pm.hook

    def plugins(self) -> list[PluginInfo]:
        """Every plugin seen: active, blocked or failed, sorted by name."""
        return sorted(self._info.values(), key=lambda p: (not p.builtin, p.name))

    def names(self, kind: str) -> list[str]:
        """Names of the descriptors of ``kind`` (storage, locks, backoff, credentials)."""
        return sorted(self._descriptors[kind])

    def cli_commands(self) -> dict[str, Any]:
        """The click commands plugins add to the CLI (``workhive_cli_commands``), by name.

        A hook that returns something other than click commands is a
        ``PluginValidationError``; two plugins adding one name a ``PluginConflict``.
        """
        import click

        found: dict[str, Any] = {}
        owner: dict[str, str] = {}
        for impl in self._pm.hook.workhive_cli_commands.get_hookimpls():
            plugin_name = impl.plugin_name
            for command in self._descriptors_of(impl.function(), click.Command, plugin_name, "click.Command"):
                name = command.name
                if name in owner:
                    a, b = self._dist[owner[name]], self._dist[plugin_name]
                    raise PluginConflict(
                        f"two plugins add the command {name!r}: {owner[name]!r} from {a[0]} {a[1]} and "
                        f"{plugin_name!r} from {b[0]} {b[1]}; uninstall one, or block it with "
                        f"WORKHIVE_DISABLE_PLUGINS={plugin_name}",
                        kind="command",
                        name=name,
                    )
                owner[name] = plugin_name
                found[name] = command
        return found

    def get(self, kind: str, name_or_scheme: str) -> Any:
        """The descriptor of ``kind`` with that name or URL scheme, or PluginNotFound listing the alternatives."""
        try:
            return self._by_scheme[kind][name_or_scheme]
        except KeyError:
            pass
        installed = ", ".join(sorted(self._by_scheme[kind])) or "none"
        hint = ""
        package = KNOWN_PACKAGES.get(name_or_scheme)
        blocked = [p.name for p in self._info.values() if p.status == "blocked"]
        if package:
            hint = f" It is provided by the {package} package: pip install {package}."
            if any(package.endswith(b) or b == name_or_scheme for b in blocked):
                hint += " (A plugin of that name is blocked by WORKHIVE_DISABLE_PLUGINS.)"
        raise PluginNotFound(
            f"no {kind} plugin named {name_or_scheme!r}; installed: {installed}.{hint}",
            kind=kind,
            name=name_or_scheme,
        )


_default: dict[frozenset[str], PluginManager] = {}


def default_manager() -> PluginManager:
    """The process-wide manager (entry points loaded, errors raised), built once per blocklist."""
    key = disabled_from_env()
    manager = _default.get(key)
    if manager is None:
        manager = _default[key] = PluginManager(disabled=key)
    return manager
