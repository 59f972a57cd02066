"""``EnvCredentials``: API keys from environment variables.

``env:PREFIX`` reads ``PREFIX`` and ``PREFIX_1``, ``PREFIX_2``, … — every
numbered variable that is set, found by scanning the environment, so a gap
in the numbering (``_1``, ``_2``, ``_4``) is warned about instead of silently
dropping the keys after it. Per key, ``PREFIX_BASE_URL_<n>``,
``PREFIX_MODEL_<n>`` and ``PREFIX_MAX_CONCURRENCY_<n>`` (or the unnumbered
``PREFIX_BASE_URL`` … as the default for all of the prefix's keys) fill in the
credential; ``PREFIX_RPM_<n>``, ``PREFIX_TPM_<n>``, ``PREFIX_TPD_<n>`` (or
unnumbered) give its rate budget (``workhive.budgets``), and
``PREFIX_CONCURRENCY_<n>`` the calls it may have in flight across the whole
fleet (``PREFIX_MAX_CONCURRENCY_<n>`` caps one process only). ``env:A,B`` combines prefixes.

Warnings name variables, never values.

>>> env = {"KEY": "sk-0", "KEY_1": "sk-1", "KEY_MODEL_1": "small"}
>>> [(c.name, c.model) for c in EnvCredentials(["KEY"], environ=env).credentials()]
[('KEY', None), ('KEY_1', 'small')]
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence

from workhive.budgets import Budget
from workhive.credentials import Credential, Secret
from workhive.errors import ConfigError

__all__ = ["EnvCredentials"]

log = logging.getLogger("workhive_env_credentials")

_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class EnvCredentials:
    """Credentials from the environment variables named by one or more prefixes.

    ``environ`` defaults to ``os.environ``, read each time ``credentials()`` is
    called (so a test's monkeypatch, or a re-exec with new variables, is seen).

    >>> EnvCredentials.from_spec("OPENAI_API_KEY,ANTHROPIC_API_KEY").prefixes
    ('OPENAI_API_KEY', 'ANTHROPIC_API_KEY')
    """

    def __init__(self, prefixes: Sequence[str], *, environ: Mapping[str, str] | None = None) -> None:
        if isinstance(prefixes, str):
            prefixes = [prefixes]
        cleaned: list[str] = []
        for prefix in prefixes:
            if not isinstance(prefix, str) or _PREFIX.fullmatch(prefix.strip()) is None:
                raise ConfigError(
                    f"environment variable prefix {prefix!r} is not a valid variable name: use letters, digits "
                    "and _, not starting with a digit (e.g. env:ANTHROPIC_API_KEY)",
                    prefix=prefix,
                )
            if prefix.strip() not in cleaned:
                cleaned.append(prefix.strip())
        if not cleaned:
            raise ConfigError("env: needs at least one prefix, e.g. env:ANTHROPIC_API_KEY")
        self.prefixes = tuple(cleaned)
        self._environ = environ

    @classmethod
    def from_spec(cls, spec: str) -> EnvCredentials:
        """From the part after ``env:``: one prefix or several separated by commas."""
        parts = [part.strip() for part in str(spec).split(",")]
        if any(not part for part in parts):
            raise ConfigError(
                f"credential spec env:{spec} has an empty prefix: write env:PREFIX or env:PREFIX_A,PREFIX_B",
                spec=spec,
            )
        return cls(parts)

    def __repr__(self) -> str:
        return f"EnvCredentials({list(self.prefixes)!r})"

    def credentials(self) -> Iterator[Credential]:
        """Every credential the prefixes name, in prefix order, then number order."""
        environ = os.environ if self._environ is None else self._environ
        seen: dict[str, str] = {}  # secret value -> the variable that first had it
        for prefix in self.prefixes:
            for variable in _key_variables(prefix, environ):
                raw = environ.get(variable, "")
                value = raw.strip()
                if not value:
                    log.warning("%s is set but empty; ignoring it", variable)
                    continue
                first = seen.get(value)
                if first is not None:
                    log.warning("%s holds the same key as %s; using it once, as %s", variable, first, first)
                    continue
                seen[value] = variable
                suffix = variable[len(prefix) :]  # "" or "_3"
                yield Credential(
                    name=variable,
                    secret=Secret(value),
                    base_url=_setting(environ, prefix, "BASE_URL", suffix),
                    model=_setting(environ, prefix, "MODEL", suffix),
                    max_concurrency=_limit(environ, prefix, suffix),
                    budget=_budget(environ, prefix, suffix, variable),
                )


def _key_variables(prefix: str, environ: Mapping[str, str]) -> list[str]:
    """``PREFIX`` (if set) and the numbered ``PREFIX_<n>`` variables, in number order; warns about gaps."""
    numbered = re.compile(re.escape(prefix) + r"_(\d+)")
    found: dict[int, str] = {}
    for name in environ:
        match = numbered.fullmatch(name)
        if match is None:
            continue
        digits = match.group(1)
        if digits.startswith("0"):
            log.warning("%s is ignored: numbering starts at %s_1 and has no leading zeros", name, prefix)
            continue
        found[int(digits)] = name
    variables = [prefix] if prefix in environ else []
    if found:
        missing = [n for n in range(1, max(found)) if n not in found]
        if missing:
            shown = ", ".join(f"{prefix}_{n}" for n in missing[:10]) + (" …" if len(missing) > 10 else "")
            log.warning(
                "%s_1 … %s_%d has a gap (%s not set); the keys after the gap are used anyway. "
                "Renumber them if the gap is a mistake",
                prefix,
                prefix,
                max(found),
                shown,
            )
        variables.extend(found[n] for n in sorted(found))
    return variables


def _setting(environ: Mapping[str, str], prefix: str, setting: str, suffix: str) -> str | None:
    # The numbered setting wins; the unnumbered one is the default for all of the prefix's keys.
    for name in (f"{prefix}_{setting}{suffix}", f"{prefix}_{setting}"):
        value = environ.get(name, "").strip()
        if value:
            return value
    return None


def _limit(environ: Mapping[str, str], prefix: str, suffix: str) -> int | None:
    for name in (f"{prefix}_MAX_CONCURRENCY{suffix}", f"{prefix}_MAX_CONCURRENCY"):
        value = environ.get(name, "").strip()
        if not value:
            continue
        if not value.isdigit() or int(value) < 1:
            raise ConfigError(f"{name}={value!r} must be a whole number >= 1 (requests at a time)", variable=name)
        return int(value)
    return None


def _budget(environ: Mapping[str, str], prefix: str, suffix: str, credential: str) -> Budget | None:
    """``PREFIX_RPM_<n>`` / ``_TPM_`` / ``_TPD_`` / ``_CONCURRENCY_<n>`` (numbered wins over unnumbered)."""
    fields: dict[str, str] = {}
    for field in ("rpm", "tpm", "tpd", "concurrency"):
        for name in (f"{prefix}_{field.upper()}{suffix}", f"{prefix}_{field.upper()}"):
            if name in environ:
                fields[field] = environ[name]
                break
    if not fields:
        return None
    try:
        return Budget.parse(fields, credential=credential)
    except ConfigError as exc:
        field = getattr(exc, "field", "?")
        raise ConfigError(
            f"{exc} (set by the environment variable {prefix}_{str(field).upper()}{suffix} "
            f"or {prefix}_{str(field).upper()})",
            credential=credential,
            field=field,
        ) from None
