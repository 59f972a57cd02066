"""Descriptors that factory hooks return: small, frozen, validated.

A plugin says *what* it provides with a descriptor; the factory inside it is
called only when a user selects that name, so a plugin module can import
cheaply and load its driver inside the factory.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from workhive.errors import ConfigError, PluginValidationError
from workhive.urls import redact_url

__all__ = ["BackoffPlugin", "CredentialsPlugin", "LocksPlugin", "StoragePlugin", "PLUGIN_KINDS"]

_PLUGIN_NAME = re.compile(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*")
#: a URL scheme may also join words with ``+`` or ``.`` (RFC 3986: ``redis+cluster``, ``redis+sentinel``)
_SCHEME_NAME = re.compile(r"[a-z][a-z0-9]*(?:[-_+.][a-z0-9]+)*")


def _check_name(instance: Any, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or _PLUGIN_NAME.fullmatch(value) is None or len(value) > 64:
        raise PluginValidationError(
            f"{type(instance).__name__}.{attribute.name} {value!r} is invalid: use lowercase letters, "
            "digits, '-' or '_', starting with a letter (at most 64 characters)",
            value=value,
        )


def _check_callable(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not callable(value):
        raise PluginValidationError(
            f"{type(instance).__name__}.{attribute.name} must be callable, got {type(value).__name__}"
        )


def _schemes(value: Iterable[str]) -> tuple[str, ...]:
    # A typed converter: mypy cannot see through ``converter=tuple`` for str input.
    return (value,) if isinstance(value, str) else tuple(value)


def _check_schemes(instance: Any, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    for scheme in value:
        if not isinstance(scheme, str) or _SCHEME_NAME.fullmatch(scheme) is None or len(scheme) > 64:
            raise PluginValidationError(
                f"{type(instance).__name__}.{attribute.name} {scheme!r} is invalid: use lowercase letters, "
                "digits, '-', '_', '+' or '.', starting with a letter (at most 64 characters)",
                value=scheme,
            )


@attrs.frozen
class _SchemedPlugin:
    """A descriptor selected by URL scheme: its name, plus any ``schemes`` aliases."""

    name: str = attrs.field(validator=_check_name)
    factory: Callable[..., Any] = attrs.field(validator=_check_callable)
    description: str = ""
    schemes: tuple[str, ...] = attrs.field(default=(), converter=_schemes, validator=_check_schemes)

    @property
    def all_schemes(self) -> tuple[str, ...]:
        return (self.name, *[s for s in self.schemes if s != self.name])


def _option_names(value: Iterable[str] | None) -> tuple[str, ...] | None:
    # A typed converter, like ``_schemes``: one name alone is one option, not its letters.
    if value is None:
        return None
    return (value,) if isinstance(value, str) else tuple(value)


def _check_options(instance: Any, attribute: attrs.Attribute[Any], value: tuple[str, ...] | None) -> None:
    for option in value or ():
        if not isinstance(option, str) or not option.isidentifier():
            raise PluginValidationError(
                f"{type(instance).__name__}.{attribute.name} must name keyword arguments, got {option!r}"
            )


@attrs.frozen
class StoragePlugin(_SchemedPlugin):
    """Provides a storage backend.

    ``factory(url, **options)`` gets the full URL (``sqlite:///x.db?synchronous=full``)
    and returns an unopened ``StorageBackend``. ``schemes`` are the URL schemes
    it answers to (default: its name). ``options`` names the keyword options
    the factory takes (``("clock", "create")``): ``open`` refuses any other
    with a ``ConfigError`` before the factory runs (rule F1), so no plugin
    repeats that check; ``None`` leaves it to the factory.

    >>> plugin = StoragePlugin(name="mystore", factory=lambda url, **kw: url, options=("create",))
    >>> plugin.open("mystore://", create=False)
    'mystore://'
    """

    options: tuple[str, ...] | None = attrs.field(default=None, converter=_option_names, validator=_check_options)

    def open(self, url: str, **options: Any) -> Any:
        """Return ``factory(url, **options)``; an option not in ``self.options`` is a ``ConfigError`` naming it."""
        if self.options is not None:
            unknown = sorted(set(options) - set(self.options))
            if unknown:
                # Shown redacted: the URL may carry a password (rule: no secret in any text workhive emits).
                accepted = ", ".join(f"{name}=" for name in self.options) or "no options"
                raise ConfigError(
                    f"{self.name} storage does not take the option(s) {', '.join(unknown)}; it accepts "
                    f"{accepted} (settings of the store itself go in the URL's query)",
                    url=redact_url(url),
                    unknown=unknown,
                    accepted=list(self.options),
                )
        return self.factory(url, **options)


@attrs.frozen
class LocksPlugin(_SchemedPlugin):
    """Provides a lock provider; ``factory(url)`` returns a ``LockProvider``."""


@attrs.frozen
class BackoffPlugin:
    """Provides a backoff strategy; ``factory(**params)`` returns a ``BackoffStrategy``."""

    name: str = attrs.field(validator=_check_name)
    factory: Callable[..., Any] = attrs.field(validator=_check_callable)
    description: str = ""


@attrs.frozen
class CredentialsPlugin:
    """Provides credentials; ``factory(spec)`` (``env:OPENAI_API_KEY`` → spec ``OPENAI_API_KEY``) returns a provider."""

    name: str = attrs.field(validator=_check_name)
    factory: Callable[..., Any] = attrs.field(validator=_check_callable)
    description: str = ""


#: kind -> (hook name, descriptor class)
PLUGIN_KINDS: dict[str, tuple[str, type]] = {
    "storage": ("workhive_storage", StoragePlugin),
    "locks": ("workhive_locks", LocksPlugin),
    "backoff": ("workhive_backoff", BackoffPlugin),
    "credentials": ("workhive_credentials", CredentialsPlugin),
}
