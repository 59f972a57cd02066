"""Configuration: flags > ``WORKHIVE_*`` environment > ``workhive.toml`` / ``[tool.workhive]`` > defaults.

Every setting has one name, used in all four places: ``lease`` is the
``--lease`` flag, the ``WORKHIVE_LEASE`` variable and the ``lease = 30`` key
(``max_attempts`` may also be written ``max-attempts`` in a file). The file is
found by searching the current directory and its parents for
``workhive.toml``, then for a ``pyproject.toml`` with a ``[tool.workhive]``
table; the first directory with either wins. ``WORKHIVE_CONFIG`` (or the
CLI's ``--config``) names a file explicitly.

Relative paths in URLs (``sqlite:///.workhive/hive.db``) are relative to the
directory workhive runs in, as for any URL.

>>> config = load_config(flags={"lease": 30.0}, env={}, search_from=None)
>>> config["lease"], config.source("lease")
(30.0, 'flag --lease')
>>> config["storage"], config.source("storage")
('sqlite:///.workhive/hive.db', 'default')
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from workhive.defaults import DEFAULT_BACKOFF, DEFAULT_STORAGE, default_locks_url
from workhive.errors import ConfigError
from workhive.plugin_manager import PluginManager, default_manager

if sys.version_info >= (3, 11):
    import tomllib as _toml
else:  # pragma: no cover - exercised on 3.10 only
    try:
        import tomli as _toml
    except ImportError:  # reported when a file actually needs reading
        _toml = None

__all__ = ["SETTINGS", "Config", "Setting", "find_config_file", "load_config"]

CONFIG_FILE = "workhive.toml"
ENV_PREFIX = "WORKHIVE_"
PROGRESS_MODES = ("auto", "bar", "log", "none")


def _cpu_count(values: Mapping[str, Any], plugins: Callable[[], PluginManager]) -> int:
    return os.cpu_count() or 1


@attrs.frozen
class Setting:
    """One configuration key: its type, default and meaning.

    ``kind`` is ``str``, ``int``, ``float``, ``list`` (of strings) or ``choice``.
    ``default`` may be a callable computing it from the other resolved values and
    the installed plugins: ``default(values, plugins)``, where ``plugins()`` returns
    the plugin manager (built only if a default asks for it).
    """

    key: str
    kind: str
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    optional: bool = False  # None is a valid value (and the default)
    zero_ok: bool = False  # a float setting whose minimum (0) is itself allowed

    @property
    def env_var(self) -> str:
        return ENV_PREFIX + self.key.upper()

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")


def _default_locks(values: Mapping[str, Any], plugins: Callable[[], PluginManager]) -> str:
    # The same rule as Hive.locks(), so `workhive config` shows the provider a fleet will use.
    return default_locks_url(values["storage"], plugins())


SETTINGS: tuple[Setting, ...] = (
    Setting("storage", "str", DEFAULT_STORAGE, "storage URL (where pools and workers live)"),
    Setting(
        "locks",
        "str",
        _default_locks,
        "lock provider URL (default: the storage URL when its plugin provides locks, as PostgreSQL, Redis and "
        "memory do; else fcntl:///.workhive/locks)",
    ),
    Setting("backoff", "str", DEFAULT_BACKOFF, "backoff strategy spec, e.g. full-jitter?base=0.5&cap=60"),
    Setting("credentials", "list", (), "credential provider specs, e.g. env:OPENAI_API_KEY"),
    Setting("handler", "str", None, "default handler for `workhive work`, module:function", optional=True),
    Setting("processes", "int", _cpu_count, "worker processes (default: the CPU count)", minimum=1),
    Setting("min_processes", "int", None, "scale down to this many processes", minimum=1, optional=True),
    Setting("max_processes", "int", None, "scale up to this many processes", minimum=1, optional=True),
    Setting("concurrency", "int", 1, "async workers per process", minimum=1),
    Setting("batch", "int", 1, "items claimed per claim call", minimum=1),
    Setting("lease", "float", 60.0, "seconds a claim lasts without a heartbeat", minimum=0),
    Setting("heartbeat", "float", 10.0, "seconds between heartbeats (which extend leases)", minimum=0),
    Setting("max_attempts", "int", 5, "claims before an item is poisoned", minimum=1),
    Setting("reap_after", "float", 60.0, "seconds of silence before a worker is declared lost", minimum=0),
    Setting(
        "grace", "float", 30.0, "seconds in-flight items get to finish after SIGTERM (0: none)", minimum=0, zero_ok=True
    ),
    Setting(
        "max_rate_limit_retries", "int", 50, "rate-limit releases per item before it counts as a failure", minimum=1
    ),
    Setting("progress", "choice", "auto", "progress display", choices=PROGRESS_MODES),
    Setting(
        "metrics_port",
        "int",
        None,
        "serve Prometheus metrics for the whole fleet on this port of 127.0.0.1 (workhive[metrics])",
        minimum=1,
        optional=True,
    ),
)
_BY_KEY = {s.key: s for s in SETTINGS}


@attrs.frozen
class Config:
    """Resolved settings and where each came from.

    >>> config = load_config(env={"WORKHIVE_STORAGE": "memory://"}, search_from=None)
    >>> config["locks"], config.source("storage")
    ('memory://', 'env WORKHIVE_STORAGE')
    """

    values: Mapping[str, Any]
    sources: Mapping[str, str]
    file: Path | None = None

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def source(self, key: str) -> str:
        """Where the value of ``key`` came from: ``flag --x``, ``env WORKHIVE_X``, a file, or ``default``."""
        return self.sources[key]

    def to_json(self) -> dict[str, Any]:
        """``{key: {"value": …, "source": …}}`` for ``workhive config --json``."""
        return {
            s.key: {
                "value": list(v) if isinstance(v := self.values[s.key], tuple) else v,
                "source": self.sources[s.key],
            }
            for s in SETTINGS
        }

    def fleet_options(self, pool: str, handler: str | None = None, **overrides: Any) -> Any:
        """A ``FleetOptions`` for ``pool`` from these settings (``overrides`` win).

        >>> opts = load_config(env={}, search_from=None).fleet_options("p", "mod:fn", until_empty=True)
        >>> opts.pool, opts.lease, opts.until_empty
        ('p', 60.0, True)
        """
        from workhive.runtime.options import FleetOptions  # the runtime imports config, not the other way

        chosen = handler if handler is not None else self.values["handler"]
        if not chosen:
            raise ConfigError(
                "no handler given: pass --handler module:function, or set handler in workhive.toml or WORKHIVE_HANDLER"
            )
        fields = {
            key: self.values[key]
            for key in (
                "storage",
                "locks",
                "backoff",
                "credentials",
                "processes",
                "min_processes",
                "max_processes",
                "concurrency",
                "batch",
                "lease",
                "heartbeat",
                "max_attempts",
                "reap_after",
                "grace",
                "max_rate_limit_retries",
                "progress",
                "metrics_port",
            )
        }
        fields.update(overrides)
        return FleetOptions(pool=pool, handler=chosen, **fields)


# -- reading values -----------------------------------------------------------
def _type_name(setting: Setting) -> str:
    return {
        "str": "a string",
        "int": "an integer",
        "float": "a number",
        "list": "a list of strings",
        "choice": "one of " + ", ".join(setting.choices),
    }[setting.kind]


def _coerce(setting: Setting, value: Any, where: str, *, from_text: bool) -> Any:
    """Check (and for environment text, parse) ``value`` for ``setting``; ConfigError naming ``where``."""

    def bad(detail: str = "") -> ConfigError:
        return ConfigError(
            f"{where}: {setting.key} must be {_type_name(setting)}{detail}, got {value!r}",
            key=setting.key,
            where=where,
        )

    if value is None and setting.optional:
        return None
    kind = setting.kind
    if kind in ("str", "choice"):
        if not isinstance(value, str) or not value.strip():
            raise bad()
        value = value.strip()
        if kind == "choice" and value not in setting.choices:
            raise bad()
        return value
    if kind == "list":
        if from_text and isinstance(value, str):
            value = [part for part in value.split(",")]
        if isinstance(value, str):  # a lone string in a file is a one-element list
            value = [value]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v.strip() for v in value):
            raise bad()
        return tuple(v.strip() for v in value)
    if kind == "int":
        if from_text and isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise bad() from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad()
        if setting.minimum is not None and value < setting.minimum:
            raise bad(f" >= {setting.minimum:g}")
        return value
    # float
    if from_text and isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise bad() from None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value != value
        or value
        in (
            float("inf"),
            float("-inf"),
        )
    ):
        raise bad(" (seconds)")
    if setting.minimum is not None and setting.zero_ok and value < setting.minimum:
        raise bad(f" >= {setting.minimum:g} (seconds)")
    if setting.minimum is not None and not setting.zero_ok and value <= setting.minimum:
        raise bad(f" > {setting.minimum:g} (seconds)")
    return float(value)


def _read_toml(path: Path) -> dict[str, Any]:
    if _toml is None:
        raise ConfigError(
            f"{path}: reading TOML on Python 3.10 needs the tomli package: pip install 'tomli>=2'", file=str(path)
        )
    try:
        with path.open("rb") as fh:
            return _toml.load(fh)
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot read the configuration file: {exc.strerror or exc}", file=str(path)
        ) from None
    except _toml.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}", file=str(path)) from None


def _table_of(path: Path, data: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The workhive table of a parsed file and how to name it in messages (None: the file has none)."""
    if path.name == "pyproject.toml":
        tool = data.get("tool", {})
        table = tool.get("workhive") if isinstance(tool, dict) else None
        if table is not None and not isinstance(table, dict):
            raise ConfigError(f"{path}: [tool.workhive] must be a table of settings", file=str(path))
        return table, f"{path} [tool.workhive]"
    return data, str(path)


def find_config_file(start: Path) -> tuple[Path, dict[str, Any], str] | None:
    """Search ``start`` and its parents for ``workhive.toml`` or a pyproject with ``[tool.workhive]``.

    Returns ``(path, table, label)`` for the first found, or None.
    """
    for directory in (start, *start.parents):
        candidate = directory / CONFIG_FILE
        if candidate.is_file():
            table, label = _table_of(candidate, _read_toml(candidate))
            return candidate, table or {}, label
        pyproject = directory / "pyproject.toml"
        if pyproject.is_file():
            table, label = _table_of(pyproject, _read_toml(pyproject))
            if table is not None:
                return pyproject, table, label
    return None


def _file_values(table: Mapping[str, Any], label: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for raw_key, value in table.items():
        key = raw_key.replace("-", "_")
        setting = _BY_KEY.get(key)
        if setting is None:
            close = difflib.get_close_matches(key, _BY_KEY, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"{label}: unknown key {raw_key!r}{hint}; known keys: {', '.join(_BY_KEY)}",
                key=raw_key,
                where=label,
            )
        values[key] = _coerce(setting, value, label, from_text=False)
    return values


def load_config(
    flags: Mapping[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    search_from: Path | str | None = ".",
    config_file: Path | str | None = None,
    manager: PluginManager | None = None,
) -> Config:
    """Resolve every setting: ``flags`` (None means not given) > environment > file > defaults.

    ``search_from=None`` skips the file search (``config_file`` or ``WORKHIVE_CONFIG`` still apply).
    ``manager`` is what the defaults that depend on installed plugins ask (the lock provider
    follows the storage when its plugin provides locks); ``None`` means the process-wide
    ``default_manager()``, loaded only if such a default is needed.
    Raises ``ConfigError`` naming the file/variable/flag and key for an unknown key or a wrong type.
    """
    environ = os.environ if env is None else env
    flags = dict(flags or {})
    for key in flags:
        if key not in _BY_KEY:
            raise ConfigError(f"unknown setting {key!r}; known: {', '.join(_BY_KEY)}", key=key)

    explicit = config_file or environ.get(ENV_PREFIX + "CONFIG") or None
    found: tuple[Path, dict[str, Any], str] | None
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(f"configuration file {str(path)!r} does not exist", file=str(path))
        table, label = _table_of(path, _read_toml(path))
        if table is None:
            raise ConfigError(f"{path} has no [tool.workhive] table", file=str(path))
        found = (path, table, label)
    elif search_from is not None:
        found = find_config_file(Path(search_from).resolve())
    else:
        found = None
    from_file = _file_values(found[1], found[2]) if found else {}

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    computed: list[tuple[Setting, Callable[[Mapping[str, Any], Callable[[], PluginManager]], Any]]] = []
    for setting in SETTINGS:
        flag_value = flags.get(setting.key)
        env_text = environ.get(setting.env_var, "")
        if flag_value is not None and flag_value != ():
            values[setting.key] = _coerce(setting, flag_value, f"flag {setting.flag}", from_text=False)
            sources[setting.key] = f"flag {setting.flag}"
        elif env_text.strip():
            values[setting.key] = _coerce(setting, env_text, f"env {setting.env_var}", from_text=True)
            sources[setting.key] = f"env {setting.env_var}"
        elif setting.key in from_file:
            assert found is not None
            values[setting.key] = from_file[setting.key]
            sources[setting.key] = found[2]
        else:
            sources[setting.key] = "default"
            if callable(setting.default):
                computed.append((setting, setting.default))
            else:
                values[setting.key] = setting.default

    def plugins() -> PluginManager:
        # default_manager() loads every entry point: only when a default actually asks.
        return manager if manager is not None else default_manager()

    for setting, compute in computed:
        values[setting.key] = compute(values, plugins)
    _check_together(values, sources)
    return Config(values=values, sources=sources, file=found[0] if found else None)


def _check_together(values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    """Settings that are fine alone but contradict each other."""
    if values["heartbeat"] >= values["lease"]:
        raise ConfigError(
            f"heartbeat ({values['heartbeat']:g}s, from {sources['heartbeat']}) must be shorter than "
            f"lease ({values['lease']:g}s, from {sources['lease']}), or leases expire between heartbeats",
            key="heartbeat",
        )
    low, high = values["min_processes"], values["max_processes"]
    if low is not None and high is not None and low > high:
        raise ConfigError(
            f"min_processes ({low}, from {sources['min_processes']}) is larger than "
            f"max_processes ({high}, from {sources['max_processes']})",
            key="min_processes",
        )
