"""Rate budgets per API key, shared by the whole fleet through the storage backend.

A credential may carry a ``Budget`` (``rpm``, ``tpm``, ``tpd``, and
``concurrency``: calls in flight at once, fleet-wide, kept by
``workhive.runtime.key_slots``); before a
handler's call the worker reserves budget for its key in one atomic storage
call (``TakesBudget.take_budget``, decided by ``gcra_choose``) and waits the
time the backend says instead of calling into a 429. Limits not given are
learned per key (``KeyRate``: AIMD, shared through the hive's state). The
design and its measurements: ``docs/budgets.md``.

>>> budget = Budget.parse({"rpm": "500", "tpm": "200000"}, credential="OPENAI_API_KEY")
>>> budget
Budget(rpm=500.0, tpm=200000.0, tpd=None, concurrency=None)
>>> [t.key for t in budget.takes("OPENAI_API_KEY", tokens=1000, rps=budget.rpm / 60)]
['OPENAI_API_KEY:rpm', 'OPENAI_API_KEY:tpm']
"""

from __future__ import annotations

import collections
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from workhive.errors import BudgetUnsatisfiable, ConfigError, InvalidArgument

if TYPE_CHECKING:
    from workhive.credentials import Credential
    from workhive.hive import Hive
    from workhive.shared_state import SharedState

__all__ = [
    "BUDGET_NAMESPACE",
    "Budget",
    "BudgetTake",
    "FleetBudgets",
    "KeyRate",
    "Reservation",
    "TakesBudget",
    "gcra_choose",
    "learned_rates",
    "ramp_doublings",
    "ramp_seconds",
]

log = logging.getLogger("workhive.budgets")

#: the shared-state namespace learned rates live in
BUDGET_NAMESPACE = "workhive-budgets"
#: how long a learned rate is kept without being touched (seconds)
RATE_TTL = 30 * 86400.0
#: a 429 multiplies the effective rate by this (multiplicative decrease) ...
DECREASE = 0.9
#: ... and the first one, which ends the ramp (it overshoots by the time the first 429 comes back), by this
FIRST_DECREASE = 0.5
#: ... or, when many recent calls were refused (a ramp that overshot), by the share that went
#: through times this margin: the rate the key really took, a little under it
SUCCESS_MARGIN = 0.8
#: a 429 on a call that went within this many seconds after a decrease is answered by it
DECREASE_HOLD = 1.0
#: the share of a cycle counted as cooled is at most 1 - this (one 429's Retry-After may outlast a short cycle)
MIN_GOING = 0.5
#: never below this factor in one decrease
MIN_DECREASE = 0.1
#: the share of calls that went through is counted over this many seconds, per key and process,
#: and only from this many calls up
OUTCOME_WINDOW = 1.0
MIN_OUTCOMES = 8
#: after the ramp the rate grows by this fraction of its base per second (back from a decrease in ~3 s)
GROWTH = 0.04
#: while ramping up the rate doubles this often (seconds)
RAMP_DOUBLING_SECONDS = 1.0
#: ... and each doubling takes this many times as long as the one before. A provider's bucket hides
#: a rate over its limit until it runs dry, so a ramp's first 429 went at over twice the limit, and
#: the calls that go while it is on its way back are refused at the rate's excess: a ramp that slows
#: as it climbs meets the empty bucket at a lower rate (figures in docs/budgets.md)
RAMP_SLOWING = 1.25
#: a key with no known limit starts learning at this many requests per second
LEARN_START_RPS = 5.0
#: the learned rate never goes below this (one call a minute) nor above LEARN_MAX_RPS
LEARN_MIN_RPS = 1.0 / 60.0
LEARN_MAX_RPS = 10_000.0
#: tokens may burst by this many seconds' worth of the per-minute rate
TOKEN_BURST_SECONDS = 1.0
#: requests under a known rpm may burst by this many seconds' worth of it (never less than one
#: request): a quarter of the second's worth a provider's bucket holds (docs/budgets.md)
KNOWN_BURST_SECONDS = 0.25
#: a reservation is made at most this far ahead (seconds): a worker whose slot lies further out
#: comes back later, so a queue of reservations never outlives a change of the rate
RESERVE_AHEAD = 0.25
#: how often a process re-reads the fleet's learned rates, at most
REFRESH_SECONDS = 0.2
#: while ramping, each process shares how far its ramp got under the key's name plus this suffix
#: (never under the name itself: a ramp must not overwrite a decrease another process stored)
RAMP_SUFFIX = "~ramp"
#: ... kept this long (seconds): a ramp is worth resuming only soon after
RAMP_TTL = 60.0

_RATES = ("rpm", "tpm", "tpd")
_FIELDS = (*_RATES, "concurrency")
_SECONDS = {"rpm": 60.0, "tpm": 60.0, "tpd": 86400.0}


def _limit(credential: str, field: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        bad = True
    elif isinstance(value, (int, float)):
        number, bad = float(value), False
    elif isinstance(value, str):
        try:
            number, bad = float(value.strip()), False
        except ValueError:
            bad = True
    else:
        bad = True
    if bad or not math.isfinite(number) or number <= 0:
        raise ConfigError(
            f"credential {credential!r}: budget {field}={value!r} must be a positive number "
            f"({field} = {'requests' if field == 'rpm' else 'tokens'} per {'day' if field == 'tpd' else 'minute'}, "
            "e.g. rpm=500&tpm=200000)",
            credential=credential,
            field=field,
        )
    return number


def _concurrency(credential: str, value: object) -> int | None:
    if value is None:
        return None
    number: object = value
    if isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ConfigError(
            f"credential {credential!r}: budget concurrency={value!r} must be a whole number >= 1 "
            "(calls in flight at once with this key, across the fleet, e.g. concurrency=8)",
            credential=credential,
            field="concurrency",
        )
    return number


def _check_concurrency(instance: object, attribute: object, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InvalidArgument(f"Budget.concurrency must be an integer >= 1 or None, got {value!r}", value=value)


@attrs.frozen
class Budget:
    """A key's limits: requests per minute, tokens per minute, tokens per day (None: not limited/unknown),
    and ``concurrency``, the calls the key may have in flight at once across the fleet (None: no limit).

    >>> Budget(rpm=60).rps
    1.0
    """

    rpm: float | None = None
    tpm: float | None = None
    tpd: float | None = None
    concurrency: int | None = attrs.field(default=None, validator=_check_concurrency)

    @classmethod
    def parse(cls, values: Mapping[str, object], *, credential: str) -> Budget:
        """From ``{"rpm": "500", ...}`` (a spec's query, environment variables); ``ConfigError`` names the field.

        >>> Budget.parse({"rpm": "0"}, credential="K")
        Traceback (most recent call last):
        ...
        workhive.errors.ConfigError: credential 'K': budget rpm='0' must be a positive number ...
        """
        unknown = sorted(set(values) - set(_FIELDS))
        if unknown:
            raise ConfigError(
                f"credential {credential!r}: unknown budget field(s) {', '.join(unknown)}; "
                f"the fields are {', '.join(_FIELDS)}",
                credential=credential,
                field=unknown[0],
            )
        rates = {f: _limit(credential, f, values.get(f)) for f in _RATES}
        return cls(**rates, concurrency=_concurrency(credential, values.get("concurrency")))

    @property
    def empty(self) -> bool:
        """Whether no rate is limited (``concurrency`` is not a rate: ``workhive.runtime.key_slots`` keeps it)."""
        return self.rpm is None and self.tpm is None and self.tpd is None

    @property
    def rps(self) -> float | None:
        """Requests per second, if known."""
        return None if self.rpm is None else self.rpm / 60.0

    def check_tokens(self, credential: str, tokens: float) -> None:
        """``BudgetUnsatisfiable`` when one call of ``tokens`` could never fit the per-minute or per-day budget."""
        for field in ("tpm", "tpd"):
            limit = getattr(self, field)
            if limit is not None and tokens > limit:
                raise BudgetUnsatisfiable(
                    f"credential {credential!r}: a call estimated at {tokens:g} tokens can never fit its "
                    f"{field} budget of {limit:g}; lower the estimate (--token-estimate, or the handler's "
                    f"estimate_tokens) or raise the budget",
                    credential=credential,
                    field=field,
                    tokens=tokens,
                )

    def takes(self, key: str, *, tokens: float, rps: float | None) -> list[BudgetTake]:
        """The takes of one call: a request at ``rps`` (the effective rate) and ``tokens`` against tpm/tpd."""
        out = []
        if rps is not None:
            # Calls spaced at the rate with one request of tolerance, the provider's burst allowance left as
            # slack for the jitter between the schedule and when calls arrive (spending all of it costs 429s,
            # measured). Under a known rpm a quarter of it is spent: a fresh key's first calls go at once,
            # where pacing from the first call left that share of the provider's bucket unused for good.
            # A learned rate is probing the limit, and bursts on top of it would be 429s.
            tolerance = 1.0 / rps if self.rpm is None else max(1.0 / rps, KNOWN_BURST_SECONDS)
            out.append(BudgetTake(f"{key}:rpm", 1.0 / rps, tolerance, 1.0))
        for field in ("tpm", "tpd"):
            limit = getattr(self, field)
            if limit is not None and tokens:
                interval = _SECONDS[field] / limit
                out.append(BudgetTake(f"{key}:{field}", interval, TOKEN_BURST_SECONDS, float(tokens)))
        return out

    def corrections(self, key: str, delta: float) -> list[BudgetTake]:
        """Takes that move the token dimensions by ``delta`` tokens (negative: give back)."""
        return [
            BudgetTake(f"{key}:{field}", _SECONDS[field] / getattr(self, field), TOKEN_BURST_SECONDS, float(delta))
            for field in ("tpm", "tpd")
            if getattr(self, field) is not None and delta
        ]


@attrs.frozen
class BudgetTake:
    """One dimension of one call: ``cost`` units at ``interval`` seconds per unit, ``tolerance`` seconds of burst."""

    key: str
    interval: float
    tolerance: float
    cost: float


def gcra_choose(
    tats: Mapping[str, float], now: float, choices: Sequence[Sequence[BudgetTake]], max_wait: float
) -> tuple[int, float, dict[str, float]]:
    """The GCRA decision every backend makes atomically: ``(index, wait, new TATs to store)``.

    ``index`` is the choice that can go soonest (ties: the first); its
    ``wait`` is seconds from ``now``. If ``wait <= max_wait`` the returned
    TATs reserve it (store them); otherwise the dict is empty and nothing is
    taken. Keys missing from ``tats`` have never been used.

    >>> take = BudgetTake("k:rpm", 1.0, 1.0, 1.0)
    >>> gcra_choose({}, 100.0, [[take]], 0.0)
    (0, 0.0, {'k:rpm': 101.0})
    >>> gcra_choose({"k:rpm": 101.0}, 100.0, [[take]], 5.0)
    (0, 1.0, {'k:rpm': 102.0})
    """
    if not choices:
        raise InvalidArgument("take_budget needs at least one choice")
    best_index, best_wait, best_tats = 0, math.inf, {}
    for index, takes in enumerate(choices):
        wait = 0.0
        new: dict[str, float] = {}
        for take in takes:
            base = max(new.get(take.key, tats.get(take.key, now)), now)
            tat = max(base + take.cost * take.interval, now)
            new[take.key] = tat
            if take.cost > 0:
                wait = max(wait, tat - take.tolerance - now)
        if wait < best_wait:
            best_index, best_wait, best_tats = index, wait, new
    if best_wait > max_wait:
        return best_index, best_wait, {}
    return best_index, best_wait, best_tats


@runtime_checkable
class TakesBudget(Protocol):
    """An optional storage capability: reserve rate budget for the fleet in one atomic step.

    The runtime checks for it with ``isinstance`` when budgets are configured.
    Implementations compute ``gcra_choose`` on the backend's clock over the
    stored TATs of every key named, and store the new TATs, atomically (one
    transaction, one SQL statement, one Lua script).

    >>> class MyBackend:  # doctest: +SKIP
    ...     async def take_budget(self, choices, max_wait):
    ...         async with self.transaction():
    ...             now = await self.now()
    ...             index, wait, new = gcra_choose(await self._tats(choices), now, choices, max_wait)
    ...             await self._store_tats(new)
    ...             return index, wait
    """

    async def take_budget(self, choices: Sequence[Sequence[BudgetTake]], max_wait: float) -> tuple[int, float]:
        """Reserve the choice that can go soonest if it can go within ``max_wait`` seconds.

        Returns ``(index, wait)``: when ``wait <= max_wait`` the choice at
        ``index`` is reserved and its call may go ``wait`` seconds from now;
        otherwise nothing changed and ``wait`` is when the soonest could go.
        """
        ...


# -- the runtime's side ------------------------------------------------------------
def ramp_doublings(elapsed: float) -> float:
    """How many times a ramp doubled the rate in ``elapsed`` seconds of growth (each doubling slower).

    The first doubling takes ``RAMP_DOUBLING_SECONDS``, each next one ``RAMP_SLOWING`` times the last.

    >>> round(ramp_doublings(RAMP_DOUBLING_SECONDS), 6), round(ramp_doublings(ramp_seconds(3.0)), 6)
    (1.0, 3.0)
    """
    if RAMP_SLOWING == 1.0:
        return elapsed / RAMP_DOUBLING_SECONDS
    return math.log1p(elapsed * (RAMP_SLOWING - 1.0) / RAMP_DOUBLING_SECONDS) / math.log(RAMP_SLOWING)


def ramp_seconds(doublings: float) -> float:
    """The seconds of growth a ramp takes to double ``doublings`` times (``ramp_doublings``'s inverse).

    >>> ramp_seconds(2.0) == RAMP_DOUBLING_SECONDS * (1.0 + RAMP_SLOWING)
    True
    """
    if RAMP_SLOWING == 1.0:
        return doublings * RAMP_DOUBLING_SECONDS
    return RAMP_DOUBLING_SECONDS * math.expm1(doublings * math.log(RAMP_SLOWING)) / (RAMP_SLOWING - 1.0)


@attrs.define
class KeyRate:
    """A key's effective request rate: ``base`` requests/s set at ``since`` (seconds since the epoch), growing.

    ``version`` rises with every decrease, so a 429 on a call reserved under an
    older rate (already answered by a decrease) does not decrease it again.
    ``ramping`` is True until the first decrease. ``fp`` tells keys under one
    name apart (a fingerprint, never the key). ``pause`` is how long the key
    cooled after the 429 that set this rate (its Retry-After): no call went
    then, which the next decrease counts.

    >>> rate = KeyRate(base=2.0, since=100.0, ramping=False)
    >>> rate.value(110.0, ceiling=1000.0)
    2.8
    """

    base: float
    since: float
    version: int = 0
    ramping: bool = True
    fp: str = ""
    pause: float = 0.0

    def value(self, now: float, ceiling: float) -> float:
        elapsed = max(0.0, now - self.since)
        if self.ramping:
            grown = self.base * 2.0 ** min(ramp_doublings(elapsed), 64.0)
        else:
            grown = self.base * (1.0 + GROWTH * elapsed)
        return max(LEARN_MIN_RPS, min(ceiling, grown))

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, value: object) -> KeyRate | None:
        if not isinstance(value, dict):
            return None
        base, since, version = value.get("base"), value.get("since"), value.get("version")
        numbers = (base, since)
        if not all(isinstance(n, (int, float)) and not isinstance(n, bool) and math.isfinite(n) for n in numbers):
            return None
        if base <= 0 or isinstance(version, bool) or not isinstance(version, int):  # type: ignore[operator]
            return None
        pause = value.get("pause", 0.0)
        if isinstance(pause, bool) or not isinstance(pause, (int, float)) or not 0 <= pause < math.inf:
            pause = 0.0  # absent (an older workhive) or garbage: as if the key never paused
        return cls(
            float(base),  # type: ignore[arg-type]
            float(since),  # type: ignore[arg-type]
            version,
            bool(value.get("ramping", False)),
            str(value.get("fp", "")),
            float(pause),
        )


@attrs.frozen
class Reservation:
    """Budget reserved for one call: the key, when the call may go, what was taken, and under which rate.

    ``at`` is when it was reserved (seconds since the epoch): the call goes at ``at + wait``.
    ``rps`` is the key's effective rate it was reserved at (None: the key has no rate budget).
    """

    credential: Credential
    wait: float
    tokens: float
    version: int
    at: float = 0.0
    rps: float | None = None


@attrs.define
class _KeyState:
    credential: Credential
    budget: Budget
    rate: KeyRate | None
    grown: float = 0.0  # seconds of growth credited to the rate since it was set (only while the budget paced calls)
    ticked: float = -math.inf  # growth is credited up to here: when the last call that succeeded went
    shared_at: float = -math.inf  # when this process last shared how far its ramp got
    outcomes: collections.deque[tuple[float, bool]] = attrs.field(factory=collections.deque)
    # the rates this process reserved calls at since the rate was set: their mean is what the key was
    # offered over the cycle (the rate at a 429 is its peak, over the cycle's mean by half its growth)
    offered: float = 0.0
    offers: int = 0

    def outcome(self, now: float, *, ok: bool) -> None:
        self.outcomes.append((now, ok))
        while self.outcomes and self.outcomes[0][0] < now - OUTCOME_WINDOW:
            self.outcomes.popleft()

    def success_share(self, now: float) -> float:
        """The share of this process's calls on the key that went through, recently and since the last decrease."""
        recent = [ok for at, ok in self.outcomes if at >= now - OUTCOME_WINDOW]
        return sum(recent) / len(recent) if len(recent) >= MIN_OUTCOMES else 1.0

    @property
    def ceiling(self) -> float:
        return self.budget.rps if self.budget.rps is not None else LEARN_MAX_RPS

    def rps(self, now: float) -> float | None:
        if self.rate is None:
            return None
        return self.rate.value(self.rate.since + self.grown, self.ceiling)

    def reset(self, rate: KeyRate, now: float) -> None:
        """A new base rate (a decrease here or elsewhere): growth and outcomes start over."""
        self.rate, self.grown, self.ticked = rate, 0.0, now
        self.outcomes.clear()
        self.offered, self.offers = 0.0, 0

    def offer(self, rps: float | None) -> None:
        if rps is not None:
            self.offered += rps
            self.offers += 1


class FleetBudgets:
    """The budgets of a fleet's credentials: reserve, correct, learn.

    ``storage`` must implement ``TakesBudget``; ``shared`` is where learned
    rates live (``hive.shared(BUDGET_NAMESPACE)``). Keys with a known ``rpm``
    follow it (lowered by 429s, recovering to it); keys without one follow a
    learned rate when ``learn`` is True, else only their token budgets.

    >>> budgets = FleetBudgets(hive.storage, hive.shared(BUDGET_NAMESPACE), pool.credentials)  # doctest: +SKIP
    >>> reservation, wait = await budgets.reserve(candidates, tokens=500, max_wait=30)  # doctest: +SKIP
    """

    def __init__(
        self,
        storage: TakesBudget,
        shared: SharedState | None,
        credentials: Sequence[Credential],
        *,
        learn: bool = False,
        reserve_ahead: float = RESERVE_AHEAD,
        clock: Callable[[], float] = time.time,
    ) -> None:
        # Wall-clock time: the base and since of a learned rate are read by every process of the fleet.
        self._storage = storage
        self._shared = shared
        self.reserve_ahead = reserve_ahead
        self._clock = clock
        self._keys: dict[str, _KeyState] = {}
        now = clock()
        for credential in credentials:
            budget = getattr(credential, "budget", None) or Budget()
            fp = credential.secret.fingerprint()
            rate = None
            if budget.rps is not None:
                rate = KeyRate(budget.rps, now, ramping=False, fp=fp)
            elif learn:
                rate = KeyRate(LEARN_START_RPS, now, fp=fp)
            self._keys[credential.name] = _KeyState(credential, budget, rate)
        self._refreshed_at = -math.inf
        # (when, key names, tokens, reach): none of these keys could take a call of this many tokens
        # reserved within ``reach`` seconds before ``when``. The workers of a process waiting for
        # budget all wake for the same slot; one takes it, the next learns when the one after is,
        # and the rest are told that without a storage call each (the choice is serialised per
        # process, so without this a slot cost one storage round trip per waiting worker).
        self._none_before: tuple[float, frozenset[str], float, float] | None = None

    @property
    def active(self) -> bool:
        """Whether any key has a budget to keep (known limits, or learning)."""
        return any(s.rate is not None or not s.budget.empty for s in self._keys.values())

    def now(self) -> float:
        """The clock reservations are made on (``Reservation.at``)."""
        return self._clock()

    def budget_of(self, credential: Credential) -> Budget:
        return self._state(credential).budget

    def _state(self, credential: Credential) -> _KeyState:
        state = self._keys.get(getattr(credential, "name", ""))
        if state is None:
            raise InvalidArgument(f"credential {getattr(credential, 'name', credential)!r} has no budget here")
        return state

    def _key(self, state: _KeyState) -> str:
        # The fingerprint keeps a key replaced under the same name from inheriting the old one's schedule.
        return f"{state.credential.name}#{state.credential.secret.fingerprint()[:8]}"

    def check_tokens(self, tokens: float) -> None:
        """``BudgetUnsatisfiable`` if ``tokens`` exceeds any key's tpm/tpd (checked at start for the default)."""
        for state in self._keys.values():
            state.budget.check_tokens(state.credential.name, tokens)

    async def reserve(
        self, candidates: Sequence[Credential], *, tokens: float, max_wait: float
    ) -> tuple[Reservation | None, float]:
        """Reserve one call on the candidate that can go soonest (candidates in least-recently-used order).

        Returns ``(reservation, wait)``: sleep ``wait`` seconds, then call; or
        ``(None, retry_in)`` when none of them can go within ``max_wait`` or
        ``RESERVE_AHEAD`` (nothing taken; ask again in ``retry_in`` seconds).
        Raises ``BudgetUnsatisfiable`` when ``tokens`` can never fit a
        candidate's budget.
        """
        if isinstance(tokens, bool) or not isinstance(tokens, (int, float)) or not tokens >= 0 or tokens == math.inf:
            raise InvalidArgument(f"a token estimate must be a number >= 0, got {tokens!r}", tokens=tokens)
        await self.refresh()
        states = [self._state(c) for c in candidates]
        for state in states:
            state.budget.check_tokens(state.credential.name, tokens)
        now = self._clock()
        ahead = min(max_wait, self.reserve_ahead)
        names = frozenset(s.credential.name for s in states)
        hint = self._none_before
        if hint is not None:
            when, known, least, reach = hint
            if now < when and names <= known and tokens >= least and ahead <= reach:
                return None, when - now
        choices = [s.budget.takes(self._key(s), tokens=tokens, rps=s.rps(now)) for s in states]
        index, wait = await self._storage.take_budget(choices, ahead)
        if wait > ahead:
            self._none_before = (now + wait - ahead, names, float(tokens), ahead)
            return None, wait - ahead
        self._none_before = None  # a slot was taken: the next asker finds out when the one after it is
        state = states[index]
        version = 0 if state.rate is None else state.rate.version
        rps = state.rps(now)
        state.offer(rps)
        return Reservation(state.credential, wait, float(tokens), version, now, rps), wait

    def superseded(self, reservation: Reservation) -> bool:
        """Whether a decrease of the key's rate came after ``reservation`` (it was made at the old rate).

        A worker still waiting for its slot then gives the reservation up and
        reserves again: its slot was spaced for the rate that was just refused.
        """
        rate = self._state(reservation.credential).rate
        return rate is not None and rate.version > reservation.version

    async def report_usage(self, reservation: Reservation, tokens: float) -> None:
        """Correct the token budget by what the call really used (``tokens`` − the estimate)."""
        if isinstance(tokens, bool) or not isinstance(tokens, (int, float)) or not math.isfinite(tokens) or tokens < 0:
            raise InvalidArgument(f"usage must be a finite number of tokens >= 0, got {tokens!r}", tokens=tokens)
        state = self._state(reservation.credential)
        takes = state.budget.corrections(self._key(state), tokens - reservation.tokens)
        if takes:
            await self._storage.take_budget([takes], math.inf)

    # -- learning ----------------------------------------------------------------
    async def rate_limited(self, reservation: Reservation, retry_after: float | None = None) -> None:
        """A 429 on a reserved call: lower the key's rate fleet-wide (once per rate version).

        The new rate is the current one times ``DECREASE``, or, when lower, the
        rate the key really took: times the share of this process's recent
        calls on the key that went through (less a margin after a ramp, which
        overshoots: one decrease lands near the key's real limit instead of
        halving again and again), and times the share of the time since the
        last decrease in which calls went at all (the key cooled for the
        ``retry_after`` of that 429; a provider's bucket refills meanwhile and
        hides the excess, so a rate half again over the limit would otherwise
        go on bursting and cooling). ``retry_after`` is this 429's.
        """
        state = self._state(reservation.credential)
        if state.rate is None:
            return
        state.outcome(self._clock(), ok=False)
        await self.refresh(force=True)  # another process may have answered this burst of 429s already
        rate = state.rate
        if reservation.version < rate.version:
            return  # already answered by a decrease after this call was reserved
        if rate.version > 0 and reservation.at + reservation.wait < rate.since + DECREASE_HOLD:
            return  # went while the provider's bucket was still empty from the overshoot just answered
        now = self._clock()
        # A ramp overshoots by the time its first 429 comes back: land under the share that went
        # through. After it, a 429 means the rate crept just over the limit; the cooldown it brings
        # lets the provider's bucket refill, and a deep cut would leave that refill unused.
        if rate.ramping:
            factor = min(FIRST_DECREASE, state.success_share(now) * SUCCESS_MARGIN)
        else:
            cycle = now - rate.since
            going = 1.0 - min(rate.pause, cycle) / cycle if cycle > 0 else 1.0
            factor = min(DECREASE, state.success_share(now) * max(going, MIN_GOING))
        factor = max(MIN_DECREASE, factor)
        current = state.rps(now) or rate.base
        if not rate.ramping and state.offers:
            # A steady-state cycle goes from one cut to the next 429: what the key took over it is the
            # mean rate the cycle's calls were offered at (times the shares above), not its peak.
            current = min(current, state.offered / state.offers)
        elif reservation.rps is not None:
            # Cut from the rate the refused call went at, not from where the rate grew to while its
            # answer was on its way back: on a busy machine a ramp doubles again and again in that
            # time (measured in the simulation: 55/s when the first 429 went, 77/s when it was heard,
            # against a limit of 20/s), and a cut from there landed over the limit for another burst.
            current = min(current, reservation.rps)
        pause = 0.0
        if retry_after is not None and math.isfinite(retry_after) and retry_after > 0:
            pause = float(retry_after)
        # Calls made at the old rate say nothing about the new one: growth and outcomes start over.
        state.reset(KeyRate(current * factor, now, rate.version + 1, False, rate.fp, pause), now)
        log.info("credential %s: 429 under budget; effective rate now %.3g/s", state.credential.name, state.rate.base)
        await self._publish(state)

    async def succeeded(self, reservation: Reservation) -> None:
        """A call went through; if it had waited for budget, the rate grows by the time since the last one."""
        state = self._state(reservation.credential)
        rate = state.rate
        if rate is None:
            return
        now = self._clock()
        state.outcome(now, ok=True)
        # Growth is credited up to when this call went, not up to now: the answer is evidence that the
        # key took the rate of that moment, and nothing later. On a busy machine answers come back late
        # (a stalled event loop, a slow response); crediting the time they took let the rate run ahead
        # of what any call had shown, so the first 429 came back to a rate far over the limit
        # (measured: a ramp at twice the limit when the machine was loaded).
        went = reservation.at + reservation.wait if reservation.at > 0 else now
        if went <= state.ticked:
            return  # went before the last credit (or before the last decrease): shows nothing new
        if reservation.wait > 0 and state.ticked != -math.inf:
            # Grow only while the budget sets the pace: a rate the workload never used is not evidence
            # the key can take it (TCP's congestion window validation, in spirit).
            # (a process sees only its share of the key's calls: a gap of a few intervals is no idle spell)
            state.grown += min(went - state.ticked, OUTCOME_WINDOW + 10.0 / (state.rps(now) or 1.0))
        state.ticked = went
        if rate.ramping and now - state.shared_at >= REFRESH_SECONDS:
            # The fleet ramps as fast as its fastest process earned: a process that started later
            # (or waited less) would otherwise pace the key's shared schedule at its lower rate.
            state.shared_at = now
            snapshot = KeyRate(state.rps(now) or rate.base, now, rate.version, True, rate.fp)
            await self._put(state.credential.name + RAMP_SUFFIX, snapshot.to_json(), RAMP_TTL)

    async def _publish(self, state: _KeyState) -> None:
        if state.rate is not None:
            await self._put(state.credential.name, state.rate.to_json(), RATE_TTL)

    async def _put(self, name: str, value: dict[str, Any], ttl: float) -> None:
        if self._shared is None:
            return
        try:
            await self._shared.put(name, value, ttl=ttl)
        except Exception as exc:  # the fleet learns on its own meanwhile; never lose an item over it
            log.warning("could not share the rate of %s (%s)", name, type(exc).__name__)

    async def refresh(self, *, force: bool = False) -> None:
        """Merge the fleet's learned rates (at most every ``REFRESH_SECONDS`` unless ``force``)."""
        if self._shared is None:
            return
        now = self._clock()
        if not force and now - self._refreshed_at < REFRESH_SECONDS:
            return
        self._refreshed_at = now
        try:
            stored = await self._shared.items()
        except Exception as exc:
            log.warning("could not read the fleet's learned rates (%s)", type(exc).__name__)
            return
        for name, state in self._keys.items():
            mine = state.rate
            if mine is None:
                continue
            theirs = KeyRate.from_json(stored.get(name))
            if theirs is not None and theirs.fp == mine.fp and theirs.version > mine.version:
                state.reset(theirs, now)  # a decrease elsewhere (or before a restart) wins
                continue
            ramp = KeyRate.from_json(stored.get(name + RAMP_SUFFIX))
            if not mine.ramping or ramp is None or ramp.fp != mine.fp or not ramp.ramping:
                continue
            if ramp.version == mine.version and ramp.base > (state.rps(now) or mine.base):
                # Take up the ramp where the fleet's fastest process got it: as if this one had waited as long.
                state.grown = ramp_seconds(math.log2(ramp.base / mine.base))

    def rates(self) -> dict[str, float | None]:
        """Each key's effective requests per second as this process knows it (None: not rate-budgeted)."""
        now = self._clock()
        return {name: s.rps(now) for name, s in self._keys.items()}


async def learned_rates(hive: Hive) -> dict[str, dict[str, Any]]:
    """Each key's effective request rate as the fleet learned it, per minute, by key name.

    What ``workhive status`` and the dashboard show; the key's fingerprint stays in storage.

    >>> await learned_rates(hive)  # doctest: +SKIP
    {'OPENAI_API_KEY': {'rpm': 412.5, 'decreases': 2, 'ramping': False}}
    """
    out = {}
    stored = await hive.shared(BUDGET_NAMESPACE).items()
    for name, value in sorted(stored.items()):
        if name.endswith(RAMP_SUFFIX):
            continue
        rate = KeyRate.from_json(value)
        if rate is not None:  # the fingerprint stays in storage: it only tells keys apart
            rpm = rate.value(time.time(), LEARN_MAX_RPS) * 60.0  # a known limit (not stored) caps it further
            out[name] = {"rpm": round(rpm, 2), "decreases": rate.version, "ramping": rate.ramping}
    for name, value in sorted(stored.items()):
        ramp = KeyRate.from_json(value) if name.endswith(RAMP_SUFFIX) else None
        key = name[: -len(RAMP_SUFFIX)]
        if ramp is not None and key not in out:  # still ramping up: no 429 yet
            out[key] = {"rpm": round(ramp.base * 60.0, 2), "decreases": ramp.version, "ramping": True}
    return out
