"""API credentials: secrets that stay secret, and rotation by what the API answered.

* ``Secret`` wraps a key: its str, repr and format are redacted, it refuses
  to be pickled, and it compares in constant time. ``reveal()`` is the one way
  to the value, so a grep for ``reveal(`` finds every place a key leaves.
* ``Credential`` is a named secret plus optional ``base_url``, ``model`` and
  ``max_concurrency``; providers (``workhive_credentials`` plugins such as
  ``env``) yield them.
* ``classify`` maps an HTTP response or an exception to a ``Verdict``.
* ``CredentialPool`` hands out the least recently used available credential
  and takes reports: a 429 cools a key down (Retry-After, else a default that
  doubles while the 429s keep coming), 401/403 disables it with the reason,
  quota exhaustion parks it until the reset time. With ``shared=`` (a
  ``hive.shared(...)`` area) every process of the fleet sees those decisions:
  entries are keyed by the credential's *name* and carry a short fingerprint
  (a truncated SHA-256) so a key replaced under the same name starts fresh —
  the secret itself is never stored, logged or put in a message.

>>> import asyncio
>>> pool = CredentialPool([Credential("KEY_1", Secret("sk-1")), Credential("KEY_2", Secret("sk-2"))])
>>> async def call_api():
...     cred = await pool.acquire()
...     try:
...         status = 429  # what the API answered, e.g. response.status_code
...         await pool.report_verdict(cred, classify(status=status, headers={"Retry-After": "20"}))
...     finally:
...         pool.release(cred)
...     return [(s.name, s.state) for s in pool.snapshot()]
>>> asyncio.run(call_api())
[('KEY_1', 'cooling'), ('KEY_2', 'available')]
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import hmac
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, runtime_checkable

import attrs

from workhive.budgets import Budget
from workhive.errors import ConfigError, CredentialError, InvalidArgument, NoCredentialAvailable
from workhive.redaction import register_secret, scrub, scrub_value
from workhive.retry_after import parse_retry_after
from workhive.urls import parse_options
from workhive.validation import check_name, check_nonnegative, check_positive

if TYPE_CHECKING:
    from workhive.plugin_manager import PluginManager
    from workhive.shared_state import SharedState

__all__ = [
    "Credential",
    "CredentialPool",
    "CredentialProvider",
    "CredentialState",
    "Outcome",
    "Secret",
    "Verdict",
    "classify",
    "DEFAULT_NAMESPACE",
]

log = logging.getLogger("workhive.credentials")

#: the shared-state namespace cooldowns live in unless the pool is given another
DEFAULT_NAMESPACE = "workhive-credentials"
_REDACTED = "**********"


# -- Secret -------------------------------------------------------------------
class Secret:
    """A secret string that does not print itself.

    >>> key = Secret("sk-live-123")
    >>> key, str(key), f"{key}"
    (Secret('**********'), '**********', '**********')
    >>> key.reveal()
    'sk-live-123'
    """

    __slots__ = ("_value",)
    _value: str

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise InvalidArgument(f"a Secret wraps a str, got {type(value).__name__}")
        if not value.strip():
            raise InvalidArgument("a Secret must not be empty or whitespace-only")
        object.__setattr__(self, "_value", value)

    def reveal(self) -> str:
        """The secret value: call this only where the key is sent to the API."""
        return self._value

    def fingerprint(self) -> str:
        """A short SHA-256 prefix: tells two keys apart without being usable as one."""
        return hashlib.sha256(self._value.encode()).hexdigest()[:12]

    def __repr__(self) -> str:
        return f"Secret({_REDACTED!r})"

    def __str__(self) -> str:
        return _REDACTED

    def __format__(self, spec: str) -> str:
        return _REDACTED

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        # Constant time: a timing difference must not tell how much of a guess was right.
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash(("workhive.Secret", self._value))

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("Secret is immutable")

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        _refuse_pickle()

    def __reduce__(self) -> NoReturn:
        _refuse_pickle()

    def __copy__(self) -> Secret:
        return self  # immutable: copying would only go through pickling, which is refused

    def __deepcopy__(self, memo: dict[int, Any]) -> Secret:
        return self


def _refuse_pickle() -> NoReturn:
    # Pickles end up in queues, caches and crash dumps, in plain text. A worker
    # process should build its credentials from the provider spec (env:…) instead.
    raise TypeError(
        "a Secret cannot be pickled (it would be written out in plain text); "
        "build credentials in each process from the provider spec, e.g. CredentialPool.from_specs(['env:KEY'])"
    )


def _to_secret(value: Secret | str) -> Secret:
    return value if isinstance(value, Secret) else Secret(value)


def _check_credential_name(instance: Any, attribute: attrs.Attribute[str], value: str) -> None:
    check_name("credential", value)


def _check_limit(instance: Any, attribute: attrs.Attribute[int | None], value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InvalidArgument(f"max_concurrency must be an integer >= 1 or None, got {value!r}", value=value)


@attrs.frozen
class Credential:
    """A named API key. The name (e.g. the environment variable) is public; the secret is not.

    >>> Credential("OPENAI_API_KEY_2", "sk-xyz", model="gpt-4o-mini")
    Credential(name='OPENAI_API_KEY_2', base_url=None, model='gpt-4o-mini', max_concurrency=None)
    """

    name: str = attrs.field(validator=_check_credential_name)
    secret: Secret = attrs.field(repr=False, converter=_to_secret)
    base_url: str | None = None
    model: str | None = None
    max_concurrency: int | None = attrs.field(default=None, validator=_check_limit)
    #: rate limits of this key (``workhive.budgets.Budget``), from the spec or the provider; None: unknown
    budget: Budget | None = attrs.field(
        default=None, repr=False, validator=attrs.validators.optional(attrs.validators.instance_of(Budget))
    )


@runtime_checkable
class CredentialProvider(Protocol):
    """What a ``workhive_credentials`` factory returns: something that yields credentials."""

    def credentials(self) -> Iterable[Credential]: ...


# -- classification -------------------------------------------------------------
class Outcome(str, enum.Enum):
    """What a call with a credential came to, as far as the credential is concerned."""

    OK = "ok"
    RATE_LIMITED = "rate_limited"
    AUTH_FAILED = "auth_failed"
    QUOTA_EXHAUSTED = "quota_exhausted"
    ERROR = "error"


@attrs.frozen
class Verdict:
    """An ``Outcome`` with what the server said about when to come back.

    ``retry_after`` is seconds from now; ``reset_at`` seconds since the epoch.
    """

    outcome: Outcome
    retry_after: float | None = None
    reset_at: float | None = None
    reason: str | None = None


# Words by which APIs say "this account is out of money/quota" (OpenAI sends them with a 429).
_QUOTA_WORDS = ("insufficient_quota", "quota", "billing", "credit balance", "exceeded your current")
_REASON_LIMIT = 200


def _header_map(headers: Mapping[str, Any] | Iterable[tuple[str, Any]] | None) -> dict[str, str]:
    if headers is None:
        return {}
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: dict[str, str] = {}
    for key, value in items:
        k = key.decode("latin-1") if isinstance(key, bytes) else str(key)
        v = value.decode("latin-1") if isinstance(value, bytes) else str(value)
        out[k.lower()] = v
    return out


def _body_text(body: object) -> str:
    if body is None:
        return ""
    if isinstance(body, bytes):
        return body.decode("utf-8", "replace")
    if isinstance(body, str):
        return body
    try:
        return json.dumps(body, default=str)
    except (TypeError, ValueError):
        return str(body)


def _mentions_quota(text: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in _QUOTA_WORDS)


def _retry_after(headers: dict[str, str], now: float) -> float | None:
    # OpenAI also sends retry-after-ms, more precise than the seconds header.
    millis = parse_retry_after(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000.0
    return parse_retry_after(headers.get("retry-after"), now=now)


def _short(text: str) -> str:
    # Scrubbed before it is cut: a key cut in two by the limit would no longer be recognised.
    text = " ".join(scrub(text).split())
    return text if len(text) <= _REASON_LIMIT else text[: _REASON_LIMIT - 1] + "…"


def _from_exception(exc: BaseException) -> tuple[int | None, Any, Any]:
    """Status, headers and body of an HTTP error raised by httpx, requests or an SDK, if it carries them."""
    response = getattr(exc, "response", None)
    status = getattr(exc, "status_code", None)
    if status is None:
        status = getattr(exc, "status", None)
    headers = getattr(exc, "headers", None)
    body = getattr(exc, "body", None)
    if response is not None:
        if status is None:
            status = getattr(response, "status_code", None) or getattr(response, "status", None)
        if headers is None:
            headers = getattr(response, "headers", None)
        if body is None:
            try:
                body = getattr(response, "text", None)
            except Exception:  # a streamed response not read yet: the status is enough
                body = None
    return (status if isinstance(status, int) and not isinstance(status, bool) else None), headers, body


def classify(
    status: int | None = None,
    headers: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None,
    body: object = None,
    exc: BaseException | None = None,
    *,
    now: float | None = None,
) -> Verdict:
    """What an HTTP response (or exception) means for the credential that made the call.

    * 2xx/3xx → OK;
    * 429 → RATE_LIMITED with Retry-After, unless the body speaks of quota or
      billing (OpenAI's ``insufficient_quota``) → QUOTA_EXHAUSTED; 402 → QUOTA_EXHAUSTED;
    * 401, 403 → AUTH_FAILED;
    * anything else (5xx, 529 overloaded, other 4xx, network errors) → ERROR:
      the call failed, but not because of this key.

    ``exc`` may be a workhive ``RateLimited``/``AuthFailed`` raised by a
    handler, or an HTTP error carrying ``status_code``/``response`` (httpx,
    requests, the OpenAI and Anthropic SDKs).

    >>> classify(status=429, headers={"Retry-After": "7"})
    Verdict(outcome=<Outcome.RATE_LIMITED: 'rate_limited'>, retry_after=7.0, reset_at=None, reason='HTTP 429')
    >>> classify(status=429, body='{"error": {"code": "insufficient_quota"}}').outcome
    <Outcome.QUOTA_EXHAUSTED: 'quota_exhausted'>
    """
    from workhive.errors import AuthFailed, RateLimited  # the handler signals

    now = time.time() if now is None else now
    if exc is not None:
        if isinstance(exc, RateLimited):
            retry_after = getattr(exc, "retry_after", None)
            return Verdict(Outcome.RATE_LIMITED, retry_after=retry_after, reason="rate limited (handler)")
        if isinstance(exc, AuthFailed):
            return Verdict(Outcome.AUTH_FAILED, reason=_short(str(getattr(exc, "reason", None) or exc)))
        exc_status, exc_headers, exc_body = _from_exception(exc)
        status = status if status is not None else exc_status
        headers = headers if headers is not None else exc_headers
        body = body if body is not None else exc_body
        if status is None:
            return Verdict(Outcome.ERROR, reason=_short(f"{type(exc).__name__}: {exc}"))

    hdrs = _header_map(headers)
    text = _body_text(body)
    retry_after = _retry_after(hdrs, now)
    if status is None:
        return Verdict(Outcome.ERROR, reason="no status and no exception to classify")
    if 200 <= status < 400:
        return Verdict(Outcome.OK)
    if status == 402 or (status == 429 and _mentions_quota(text)):
        reset_at = now + retry_after if retry_after is not None and math.isfinite(retry_after) else None
        return Verdict(Outcome.QUOTA_EXHAUSTED, reset_at=reset_at, reason=_short(f"HTTP {status}: {text}"))
    if status == 429:
        return Verdict(Outcome.RATE_LIMITED, retry_after=retry_after, reason=f"HTTP {status}")
    if status in (401, 403):
        return Verdict(Outcome.AUTH_FAILED, reason=_short(f"HTTP {status}: {text}" if text else f"HTTP {status}"))
    return Verdict(Outcome.ERROR, retry_after=retry_after, reason=_short(f"HTTP {status}: {text}"))


def _split_budget(spec: str, argument: str) -> tuple[str, dict[str, str] | None]:
    """``"KEY?rpm=500&tpm=2000"`` -> ``("KEY", {"rpm": "500", "tpm": "2000"})``."""
    if "?" not in argument:
        return argument, None
    argument, _, query = argument.partition("?")
    pairs: list[tuple[str, str]] = []
    for part in query.split("&"):
        name, eq, value = part.partition("=")
        if not eq or not name.strip():
            raise ConfigError(
                f"credential spec {spec!r}: budget part {part!r} must be field=value, e.g. ?rpm=500&tpm=200000",
                spec=spec,
            )
        pairs.append((name.strip(), value))
    # The rule every URL and spec follows (workhive.urls.parse_options): an option given twice is refused.
    return argument, parse_options(pairs, f"credential spec {spec!r}", spec=spec)


def _merge_budget(credential: Credential, fields: dict[str, str]) -> Budget:
    given = Budget.parse(fields, credential=credential.name)
    base = credential.budget or Budget()
    return Budget(
        rpm=given.rpm if given.rpm is not None else base.rpm,
        tpm=given.tpm if given.tpm is not None else base.tpm,
        tpd=given.tpd if given.tpd is not None else base.tpd,
        concurrency=given.concurrency if given.concurrency is not None else base.concurrency,
    )


# -- the pool ---------------------------------------------------------------------
_AVAILABLE, _COOLING, _PARKED, _DISABLED = "available", "cooling", "parked", "disabled"
_SEVERITY = {_AVAILABLE: 0, _COOLING: 1, _PARKED: 2, _DISABLED: 3}


@attrs.frozen
class CredentialState:
    """One credential as ``CredentialPool.snapshot()`` reports it (no secret in here).

    ``state`` is available, cooling (429), parked (quota) or disabled (401/403);
    ``until`` when a cooling/parked one is usable again (seconds since the
    epoch). ``counts`` are totals since the pool was built (uses, ok,
    rate_limited, auth_failed, quota, errors); ``failure_streak`` counts
    failures since the last success (a success clears it; it lengthens
    cooldowns that come without a Retry-After).
    """

    name: str
    state: str
    until: float | None
    reason: str | None
    counts: dict[str, int]
    failure_streak: int
    in_flight: int

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.define
class _Entry:
    credential: Credential
    order: int
    fingerprint: str
    state: str = _AVAILABLE
    until: float | None = None
    reason: str | None = None
    cooled_at: float = -math.inf  # when the last 429 that cooled the key (here or in the fleet) was heard
    last_used: int = -1
    in_flight: int = 0
    streak: int = 0
    counts: dict[str, int] = attrs.field(
        factory=lambda: {"uses": 0, "ok": 0, "rate_limited": 0, "auth_failed": 0, "quota": 0, "errors": 0}
    )

    @property
    def cap(self) -> float:
        """Calls this process may have in flight with the key: ``max_concurrency``, and no more than the
        fleet's ``budget.concurrency`` (a call over it would only wait for a fleet slot, holding the key)."""
        budget = self.credential.budget
        caps = [self.credential.max_concurrency, budget.concurrency if budget is not None else None]
        return min((c for c in caps if c is not None), default=math.inf)

    def effective(self, now: float) -> str:
        if self.state in (_COOLING, _PARKED) and self.until is not None and self.until <= now:
            return _AVAILABLE
        return self.state


def _redact(text: str | None, secret: Secret) -> str | None:
    # An API's error body or an exception message may echo the key back, URL-encoded or
    # JSON-escaped as often as not; never keep it (the reason is shared with the fleet).
    if text is None:
        return None
    return scrub(scrub_value(text, secret.reveal()))


def _format_when(until: float, now: float) -> str:
    stamp = time.strftime("%H:%M:%S", time.localtime(until)) if until < 1e11 else "far future"
    return f"in {max(0.0, until - now):.1f}s (at {stamp})"


class CredentialPool:
    """Rotates credentials by what the API answered; optionally shared by the fleet.

    ``shared`` (``hive.shared(DEFAULT_NAMESPACE)``) makes cooldowns, parks and
    disables visible to every process on the same storage; the pool re-reads it
    at most every ``refresh_interval`` seconds, and right after it reports.
    ``clock`` and ``sleep`` are injectable for tests (a fake clock needs a
    matching fake sleep).

    >>> pool = CredentialPool([Credential("A", "sk-a"), Credential("B", "sk-b", max_concurrency=2)])
    >>> async def handler():
    ...     cred = await pool.acquire(timeout=10)
    ...     try:
    ...         ...  # call the API with cred.secret.reveal()
    ...         await pool.report(cred, Outcome.OK)
    ...     finally:
    ...         pool.release(cred)
    """

    def __init__(
        self,
        credentials: Sequence[Credential],
        *,
        shared: SharedState | None = None,
        clock: Callable[[], float] = time.time,
        default_cooldown: float = 30.0,
        max_cooldown: float = 600.0,
        default_quota_park: float = 3600.0,
        disable_ttl: float = 86400.0,
        refresh_interval: float = 0.5,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        entries: dict[str, _Entry] = {}
        for i, credential in enumerate(credentials):
            if not isinstance(credential, Credential):
                raise InvalidArgument(f"CredentialPool takes Credential objects, got {type(credential).__name__}")
            if credential.name in entries:
                raise InvalidArgument(
                    f"two credentials are named {credential.name!r}; names identify credentials across the "
                    "fleet, so they must be unique",
                    name=credential.name,
                )
            entries[credential.name] = _Entry(credential, i, credential.secret.fingerprint())
            # Whatever path a key takes out (an API body echoed in an exception, a reason sent to the
            # supervisor, a log line, a stored item error), the process-wide scrubber catches it.
            register_secret(credential.secret.reveal())
        self._entries = entries
        self._shared = shared
        self._clock = clock
        self._sleep = sleep
        self.default_cooldown = check_positive("default_cooldown", default_cooldown)
        self.max_cooldown = check_positive("max_cooldown", max_cooldown)
        self.default_quota_park = check_positive("default_quota_park", default_quota_park)
        self.disable_ttl = check_positive("disable_ttl", disable_ttl)
        self.refresh_interval = check_nonnegative("refresh_interval", refresh_interval)
        self._tick = 0
        self._refreshed_at = -math.inf
        self._changed: asyncio.Event | None = None
        self._choosing = asyncio.Lock()

    @classmethod
    def from_specs(cls, specs: Sequence[str], *, manager: PluginManager, **kw: Any) -> CredentialPool:
        """A pool from provider specs such as ``"env:ANTHROPIC_API_KEY"`` (``scheme:argument``).

        A spec may end in a budget for every key it yields:
        ``env:OPENAI_API_KEY?rpm=500&tpm=200000&concurrency=8`` (fields rpm, tpm,
        tpd, concurrency: calls in flight per key across the fleet; see
        ``workhive.budgets``); bad values are a ``ConfigError`` naming the field
        and the credential, never its secret.

        The scheme picks the ``workhive_credentials`` plugin; its factory gets
        the rest. Credentials with the same name from two specs are taken once.

        >>> pool = CredentialPool.from_specs(["env:ANTHROPIC_API_KEY"], manager=manager)  # doctest: +SKIP
        """
        if isinstance(specs, str):
            specs = [specs]
        found: dict[str, Credential] = {}
        for spec in specs:
            if not isinstance(spec, str) or ":" not in spec or not spec.split(":", 1)[1].strip():
                raise ConfigError(
                    f"credential spec {spec!r} must be provider:argument, e.g. env:ANTHROPIC_API_KEY", spec=spec
                )
            scheme, argument = spec.split(":", 1)
            argument, budget = _split_budget(spec, argument)
            provider = manager.get("credentials", scheme.strip().lower()).factory(argument.strip())
            for credential in provider.credentials():
                if budget is not None:  # the spec's budget overrides what the provider said
                    credential = attrs.evolve(credential, budget=_merge_budget(credential, budget))
                found.setdefault(credential.name, credential)
        if not found:
            raise CredentialError(
                f"no credentials found for {', '.join(map(repr, specs)) or 'no specs'}: set the variables "
                "they name (for env:PREFIX, PREFIX or PREFIX_1, PREFIX_2, …) to non-empty values",
                specs=list(specs),
            )
        return cls(list(found.values()), **kw)

    # -- inspection -------------------------------------------------------------
    def credentials(self) -> list[Credential]:
        """The credentials, in the order given."""
        return [e.credential for e in self._entries.values()]

    @property
    def names(self) -> list[str]:
        """The credentials' names, in the order given."""
        return list(self._entries)

    def snapshot(self) -> list[CredentialState]:
        """Every credential's state as last known (call ``await refresh()`` first for the fleet's view)."""
        now = self._clock()
        out = []
        for e in self._entries.values():
            state = e.effective(now)
            blocked = state != _AVAILABLE
            out.append(
                CredentialState(
                    name=e.credential.name,
                    state=state,
                    until=e.until if state in (_COOLING, _PARKED) else None,
                    reason=e.reason if blocked else None,
                    counts=dict(e.counts),
                    failure_streak=e.streak,
                    in_flight=e.in_flight,
                )
            )
        return out

    # -- fleet-shared state -----------------------------------------------------
    async def refresh(self, *, force: bool = True) -> None:
        """Merge the fleet's cooldowns from shared state (no-op without ``shared``)."""
        if self._shared is None:
            return
        now = self._clock()
        if not force and now - self._refreshed_at < self.refresh_interval:
            return
        try:
            items = await self._shared.items()
        except Exception as exc:  # a flaky store must not stop work: fall back to what this process knows
            log.warning("could not read shared credential state (%s); using local state", type(exc).__name__)
            return
        self._refreshed_at = now
        for name, entry in self._entries.items():
            value = items.get(name)
            if value is not None:
                self._merge(entry, value, now)

    def _merge(self, entry: _Entry, value: object, now: float) -> None:
        if not isinstance(value, dict) or value.get("fp") != entry.fingerprint:
            return  # another key under this name (replaced), or not ours: ignore
        state, until, reason = value.get("state"), value.get("until"), value.get("reason")
        cooled_at = value.get("cooled_at")
        if isinstance(cooled_at, (int, float)) and not isinstance(cooled_at, bool) and cooled_at <= now:
            entry.cooled_at = max(entry.cooled_at, float(cooled_at))
        if state not in (_COOLING, _PARKED, _DISABLED):
            return
        if until is not None and not isinstance(until, (int, float)):
            return
        if state != _DISABLED and (until is None or until <= now):
            return
        mine = entry.effective(now)
        if _SEVERITY[state] > _SEVERITY[mine] or (
            state == mine and state != _DISABLED and (entry.until is None or (until or 0) > entry.until)
        ):
            entry.state, entry.until = state, (None if state == _DISABLED else float(until))  # type: ignore[arg-type]
            entry.reason = reason if isinstance(reason, str) else None
            log.debug("credential %s is %s (from the fleet): %s", entry.credential.name, state, entry.reason)

    async def _publish(self, entry: _Entry, now: float) -> None:
        if self._shared is None:
            return
        value = {"state": entry.state, "until": entry.until, "reason": entry.reason, "fp": entry.fingerprint}
        if entry.state == _COOLING and entry.cooled_at > -math.inf:
            value["cooled_at"] = entry.cooled_at  # the fleet's late 429s of this burst count from their calls
        ttl = self.disable_ttl if entry.until is None else max(entry.until - now, 0.001)
        try:
            await self._shared.put(entry.credential.name, value, ttl=ttl)
        except Exception as exc:
            log.warning(
                "could not share the state of credential %s (%s); other processes will find out on their own",
                entry.credential.name,
                type(exc).__name__,
            )

    # -- handing out --------------------------------------------------------------
    def _entry(self, credential: Credential) -> _Entry:
        entry = self._entries.get(getattr(credential, "name", None))  # type: ignore[arg-type]
        if entry is None or entry.credential != credential:
            raise InvalidArgument(
                f"credential {getattr(credential, 'name', credential)!r} is not one of this pool's "
                f"({', '.join(self._entries)})"
            )
        return entry

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def acquire(
        self,
        *,
        timeout: float | None = None,
        choose: Callable[[list[Credential]], Awaitable[tuple[int | None, float]]] | None = None,
    ) -> Credential:
        """The least recently used available credential; waits while all are cooling or busy.

        ``timeout`` bounds the wait (None: until one frees up; 0: do not wait).
        Raises ``NoCredentialAvailable`` at once when every credential is
        disabled or none frees up within the timeout, saying when one will.
        Pair every acquire with ``release``.

        ``choose`` (the fleet's rate budgets) picks among the usable credentials,
        given least recently used first: it returns ``(index, 0)``, or
        ``(None, seconds)`` when none may go yet (the pool waits that long, within
        ``timeout``, and asks again). Choices are made one at a time per pool.
        """
        if timeout is not None:
            timeout = check_nonnegative("timeout", timeout)
        deadline = None if timeout is None else self._clock() + timeout
        while True:
            await self.refresh(force=False)
            now = self._clock()
            ready = [e for e in self._entries.values() if e.effective(now) == _AVAILABLE and e.in_flight < e.cap]
            if ready:
                ready.sort(key=lambda e: (e.last_used, e.order))
                entry = ready[0]
                if choose is not None:
                    async with self._choosing:
                        # Another worker may have taken a slot while this one waited for the lock.
                        ready = [e for e in ready if e.in_flight < e.cap]
                        if not ready:
                            continue
                        index, later = await choose([e.credential for e in ready])
                    if index is None:
                        if deadline is not None and now + later > deadline:
                            self._raise_none_available(now, now + later)
                        # Not _wait: a release frees no budget, and waking every waiter on each one
                        # would turn the wait into a storm of storage calls.
                        await self._sleep(max(later, 0.001))
                        continue
                    entry = ready[index]
                if entry.state != _AVAILABLE:  # a cooldown that ran out
                    entry.state, entry.until, entry.reason = _AVAILABLE, None, None
                self._tick += 1
                entry.last_used = self._tick
                entry.in_flight += 1
                entry.counts["uses"] += 1
                log.debug("credential %s handed out", entry.credential.name)
                return entry.credential
            next_free, busy = self._next_free(now)
            if next_free is None and not busy:
                self._raise_none_available(now, None)
            if deadline is not None and (
                now >= deadline or (not busy and next_free is not None and next_free > deadline)
            ):
                self._raise_none_available(now, next_free)
            wait: float | None = None
            if next_free is not None:
                wait = next_free - now
            if deadline is not None:
                wait = deadline - now if wait is None else min(wait, deadline - now)
            if self._shared is not None:  # another process may free one (or cool more) meanwhile
                wait = self.refresh_interval if wait is None else min(wait, max(self.refresh_interval, 0.01))
            await self._wait(wait)

    def now(self) -> float:
        """The pool's clock (cooldowns and ``report(sent_at=)`` are on it)."""
        return self._clock()

    def usable(self, credential: Credential) -> bool:
        """Whether ``credential`` may be called now, as this process knows: not cooling, parked or disabled.

        A worker that reserved rate budget and slept until its slot asks this
        before the call: a 429 meanwhile cooled the key, and calling into the
        cooldown only earns another 429.

        >>> pool.usable(credential)  # doctest: +SKIP
        True
        """
        return self._entry(credential).effective(self._clock()) == _AVAILABLE

    def _next_free(self, now: float) -> tuple[float | None, bool]:
        """Earliest time a cooling/parked credential is usable, and whether any is merely busy."""
        untils = [
            e.until for e in self._entries.values() if e.effective(now) in (_COOLING, _PARKED) and e.until is not None
        ]
        busy = any(e.effective(now) == _AVAILABLE for e in self._entries.values())
        return (min(untils) if untils else None), busy

    async def _wait(self, seconds: float | None) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        changed = asyncio.ensure_future(self._changed.wait())
        waiters: set[asyncio.Future[Any]] = {changed}
        if seconds is not None:
            waiters.add(asyncio.ensure_future(self._sleep(max(seconds, 0.0))))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

    def _raise_none_available(self, now: float, next_free: float | None) -> NoReturn:
        states = self.snapshot()
        summary = "; ".join(f"{s.name}: {s.state}" + (f" ({s.reason})" if s.reason else "") for s in states)
        if next_free is None and all(s.state == _DISABLED for s in states):
            raise NoCredentialAvailable(
                f"all {len(states)} credentials are disabled ({summary}); fix or replace the keys and restart",
                next_available_at=None,
                states=states,
            )
        if next_free is None:
            when = "when a busy one is released"
        else:
            when = _format_when(next_free, now)
        raise NoCredentialAvailable(
            f"no credential is available now; the next one frees up {when} ({summary}). "
            "Wait longer (timeout=), add keys, or lower the request rate",
            next_available_at=next_free,
            states=states,
        )

    def release(self, credential: Credential) -> None:
        """Give back a credential from ``acquire`` (frees a slot of its concurrency limit)."""
        entry = self._entry(credential)
        if entry.in_flight <= 0:
            raise InvalidArgument(f"credential {entry.credential.name!r} was released more often than acquired")
        entry.in_flight -= 1
        self._notify()

    # -- reporting ------------------------------------------------------------------
    async def report_verdict(self, credential: Credential, verdict: Verdict) -> None:
        """``report`` with what ``classify`` found."""
        await self.report(
            credential,
            verdict.outcome,
            retry_after=verdict.retry_after,
            reset_at=verdict.reset_at,
            reason=verdict.reason,
        )

    async def report(
        self,
        credential: Credential,
        outcome: Outcome,
        *,
        retry_after: float | None = None,
        reset_at: float | None = None,
        reason: str | None = None,
        sent_at: float | None = None,
    ) -> None:
        """Record what a call with ``credential`` came to, and share the consequence with the fleet.

        RATE_LIMITED cools the credential for ``retry_after`` (clamped to
        ``max_cooldown``), else ``default_cooldown`` doubled per consecutive
        429; AUTH_FAILED disables it; QUOTA_EXHAUSTED parks it until
        ``reset_at`` (else ``retry_after`` from now, else ``default_quota_park``);
        OK clears the failure streak; ERROR is counted (usually not the key's fault).

        ``sent_at`` (the pool's clock, ``now()``): when the call went. The 429 of
        a call that went before the key's last cooldown began belongs to the
        burst that cooldown answers: its ``retry_after`` counts from when its
        call went, not from when it was heard (a loaded machine hears a burst's
        429s over a while, and each pushed the cooldown on by its lateness; one
        heard after its Retry-After ran out changes nothing). Any other 429
        counts from now, as the provider's clock started when it answered.
        """
        entry = self._entry(credential)
        outcome = Outcome(outcome)
        if retry_after is not None:
            if isinstance(retry_after, bool) or not isinstance(retry_after, (int, float)) or not retry_after >= 0:
                raise InvalidArgument(f"retry_after must be a number >= 0, got {retry_after!r}", value=retry_after)
        if sent_at is not None and (
            isinstance(sent_at, bool) or not isinstance(sent_at, (int, float)) or not math.isfinite(sent_at)
        ):
            raise InvalidArgument(f"sent_at must be a time on the pool's clock, got {sent_at!r}", value=sent_at)
        if reset_at is not None and (not isinstance(reset_at, (int, float)) or math.isnan(reset_at)):
            raise InvalidArgument(f"reset_at must be seconds since the epoch, got {reset_at!r}", value=reset_at)
        reason = _redact(reason, credential.secret)
        now = self._clock()
        name = entry.credential.name
        if outcome is Outcome.OK:
            entry.counts["ok"] += 1
            entry.streak = 0
            log.debug("credential %s: ok", name)
            return
        entry.streak += 1
        if outcome is Outcome.ERROR:
            entry.counts["errors"] += 1
            log.debug("credential %s: call failed (%s); not the key's fault, it stays in use", name, reason)
            return
        if outcome is Outcome.RATE_LIMITED:
            entry.counts["rate_limited"] += 1
            if retry_after is not None:
                seconds = min(float(retry_after), self.max_cooldown)
            else:
                seconds = min(self.default_cooldown * 2.0 ** min(entry.streak - 1, 30), self.max_cooldown)
            since = now
            if sent_at is not None and sent_at <= entry.cooled_at:
                since = min(now, float(sent_at))  # the same burst as the cooldown's 429, heard late
                if since + seconds <= now:
                    log.debug("credential %s: a 429 heard after its Retry-After ran out; no cooldown", name)
                    return
            else:
                entry.cooled_at = now
            self._block(entry, _COOLING, since + seconds, reason or "rate limited (429)")
            log.info("credential %s rate-limited; cooling for %.1fs", name, since + seconds - now)
        elif outcome is Outcome.QUOTA_EXHAUSTED:
            entry.counts["quota"] += 1
            if reset_at is not None and reset_at > now:
                until = float(reset_at)
            elif retry_after is not None:
                until = now + min(float(retry_after), 10 * self.default_quota_park)
            else:
                until = now + self.default_quota_park
            self._block(entry, _PARKED, until, reason or "quota exhausted")
            log.warning("credential %s: quota exhausted; parked %s", name, _format_when(until, now))
        else:  # AUTH_FAILED
            entry.counts["auth_failed"] += 1
            # Calls already in flight on the key report their 401s too: warn once, on the transition.
            already = entry.effective(now) == _DISABLED
            self._block(entry, _DISABLED, None, reason or "authentication failed (401/403)")
            (log.debug if already else log.warning)("credential %s disabled: %s", name, entry.reason)
        await self._publish(entry, now)
        self._refreshed_at = -math.inf  # read the fleet's view again before the next choice
        self._notify()

    def _block(self, entry: _Entry, state: str, until: float | None, reason: str) -> None:
        now = self._clock()
        current = entry.effective(now)
        if _SEVERITY[current] > _SEVERITY[state]:
            return  # a parked key that also gets a 429 stays parked (longer); a disabled one stays disabled
        if current == state and until is not None and entry.until is not None and entry.until > until:
            until = entry.until  # never shorten a cooldown another report set
        entry.state, entry.until, entry.reason = state, until, reason
